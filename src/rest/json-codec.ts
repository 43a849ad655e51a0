import {
  type DescMessage,
  fromJson,
  type JsonObject,
  type JsonValue,
  type Message,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { apiError } from "../errors/api-error.js";
import { shownName, unknownNameProblem } from "./field-hint.js";
import { int64NumberFields } from "./int64-json.js";

function asNumber(value: JsonValue): JsonValue {
  if (typeof value !== "string") return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
}

function numbersIn(message: DescMessage, json: JsonObject): void {
  for (const field of int64NumberFields(message)) {
    const value = json[field.name];
    if (value === undefined || value === null) continue;
    const sub = field.fieldKind === "message" || field.fieldKind === "list" || field.fieldKind === "map" ? field.message : undefined;
    if (field.fieldKind === "scalar") json[field.name] = asNumber(value);
    else if (field.fieldKind === "message" && sub !== undefined) numbersIn(sub, value as JsonObject);
    else if (field.fieldKind === "list") {
      const list = value as JsonValue[];
      for (let i = 0; i < list.length; i++) {
        if (sub === undefined) list[i] = asNumber(list[i]!);
        else numbersIn(sub, list[i] as JsonObject);
      }
    } else if (field.fieldKind === "map") {
      const map = value as JsonObject;
      for (const key of Object.keys(map)) {
        if (sub === undefined) map[key] = asNumber(map[key]!);
        else numbersIn(sub, map[key] as JsonObject);
      }
    }
  }
}

/**
 * Writes a message as the REST gateway's JSON: proto3 JSON with the proto's
 * snake_case names, implicit fields always present (so `is_active: false`
 * and `created: false` are visible), and 64-bit integers as JSON numbers
 * when they are exact in a double (proto3 JSON would quote them; the spec
 * gives file_size_bytes as a number).
 */
export function writeRestJson(schema: DescMessage, message: Message): JsonObject {
  const json = toJson(schema, message, { useProtoFieldName: true, alwaysEmitImplicit: true }) as JsonObject;
  if (int64NumberFields(schema).length > 0) numbersIn(schema, json);
  return json;
}

/** The integer scalar types: as JSON strings (and in query strings), decimal digits only. */
export const integerScalars: ReadonlySet<ScalarType> = new Set([
  ScalarType.INT32,
  ScalarType.UINT32,
  ScalarType.SINT32,
  ScalarType.FIXED32,
  ScalarType.SFIXED32,
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

/** Whether text is an integer as proto3 JSON writes one in a string: decimal digits, maybe a minus. */
export function isDecimalInteger(text: string): boolean {
  return /^-?[0-9]+$/.test(text);
}

/**
 * Whether a decimal integer's text has more digits than any 64-bit
 * integer's (20 with its sign, leading zeros aside), or is longer than any
 * client writes one (256 characters, zeros included): refused before
 * protobuf-es reads it with BigInt, whose time grows faster than the text
 * (a second for a few million digits, on the event loop).
 */
export function isOverlongInteger(text: string): boolean {
  return text.length > 256 || text.replace(/^(-?)0+(?=\d)/, "$1").length > 20;
}

/**
 * Refuses a field given under both its names (`version_id` and
 * `versionId`), which protobuf-es reports only as "set multiple times",
 * and an integer field given as a string that is not decimal digits
 * ("0x10", "6 ", "1e1"): protobuf-es parses those as JavaScript would,
 * where proto3 JSON takes decimal only, so a typo would be read as some
 * other number.
 */
function refuseAmbiguousFields(schema: DescMessage, json: JsonObject): void {
  for (const field of schema.fields) {
    if (field.name !== field.jsonName && Object.hasOwn(json, field.name) && Object.hasOwn(json, field.jsonName)) {
      throw apiError("INVALID_ARGUMENT", { field: field.name, problem: `is given twice, as ${field.name} and ${field.jsonName}: give it once` });
    }
    if (field.fieldKind !== "scalar" || !integerScalars.has(field.scalar)) continue;
    const value = json[field.name] ?? json[field.jsonName];
    if (typeof value === "string" && !isDecimalInteger(value)) {
      throw apiError("INVALID_ARGUMENT", { field: field.name, problem: `must be a whole number (a JSON number, or a string of decimal digits), got ${JSON.stringify(shownName(value))}` });
    }
    if (typeof value === "string" && isOverlongInteger(value)) {
      const type = ScalarType[field.scalar].toLowerCase();
      throw apiError("INVALID_ARGUMENT", {
        field: field.name,
        problem: `${shownName(value)} is out of range: expected a whole number${integerRanges[type] === undefined ? "" : ` from ${integerRanges[type]}`} (${type})`,
      });
    }
  }
}

/** The range of each integer type protobuf-es reads a JSON value into, for saying what a value out of it should be. */
const integerRanges: Readonly<Record<string, string>> = {
  int64: "-9223372036854775808 to 9223372036854775807",
  sint64: "-9223372036854775808 to 9223372036854775807",
  sfixed64: "-9223372036854775808 to 9223372036854775807",
  uint64: "0 to 18446744073709551615",
  fixed64: "0 to 18446744073709551615",
};

/** protobuf-es's words for a value it cannot read, which quote the value: cut to a readable length. */
function describe(text: string): string {
  const said = describeWhole(text);
  return said.length <= 300 ? said : `${said.slice(0, 300)}…`;
}

function describeWhole(text: string): string {
  const field = /cannot decode field [\w.]*\.\w+ from JSON: (.*)$/s.exec(text);
  if (field !== null) {
    return field[1]!.replace(/^expected bigint \((\w+)\): (.*) out of range$/, (_all, type: string, value: string) =>
      `${value} is out of range: expected a whole number${integerRanges[type] === undefined ? "" : ` from ${integerRanges[type]}`} (${type})`,
    );
  }
  const message = /cannot decode message ([\w.]+) from JSON:? ?(.*)$/s.exec(text);
  if (message !== null) return `expected a JSON ${message[1] === "google.protobuf.Struct" ? "object" : "value of type " + message[1]}, got ${message[2]}`;
  return text;
}

/**
 * Reads a request message from REST JSON. Proto names (snake_case) and JSON
 * names (lowerCamelCase) are both accepted; unknown keys and wrong types are
 * INVALID_ARGUMENT naming the field, because a misspelled field silently
 * dropped is a bug the caller never sees. An unknown key's error offers
 * `fieldNames` (by default every field of the message).
 */
export function readRestJson<Desc extends DescMessage>(
  schema: Desc,
  json: JsonValue,
  fieldNames: readonly string[] = schema.fields.map((f) => f.name),
): Message {
  if (typeof json === "object" && json !== null && !Array.isArray(json)) refuseAmbiguousFields(schema, json);
  try {
    return fromJson(schema, json);
  } catch (error) {
    const text = error instanceof Error ? error.message : String(error);
    const field = /cannot decode field [\w.]*\.(\w+) from JSON: (.*)$/s.exec(text);
    // protobuf-es names the field for scalars but not for a bad nested
    // message (a Struct given an array): find the key that fails alone
    // (decoding the body once more, so only when it must).
    if (field === null && typeof json === "object" && json !== null && !Array.isArray(json)) {
      for (const [key, value] of Object.entries(json)) {
        try {
          fromJson(schema, { [key]: value });
        } catch (keyError) {
          const keyText = keyError instanceof Error ? keyError.message : String(keyError);
          if (/is unknown/.test(keyText)) break;
          const field = schema.fields.find((f) => f.name === key || f.jsonName === key)?.name ?? key;
          throw apiError("INVALID_ARGUMENT", { field, problem: describe(keyText) }, { cause: error });
        }
      }
    }
    if (field !== null) throw apiError("INVALID_ARGUMENT", { field: field[1]!, problem: describe(text) }, { cause: error });
    const unknown = /key "([^"]*)" is unknown/.exec(text);
    if (unknown !== null) {
      throw apiError("INVALID_ARGUMENT", { field: shownName(unknown[1]!), problem: unknownNameProblem("field", unknown[1]!, fieldNames) });
    }
    throw apiError("MALFORMED_REQUEST", { problem: text.replace(/^cannot decode message [\w.]+ from JSON: ?/, "") });
  }
}

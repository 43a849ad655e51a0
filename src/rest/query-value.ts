import { type DescEnum, type DescField, fromJson, type JsonValue, ScalarType } from "@bufbuild/protobuf";
import { apiError } from "../errors/api-error.js";
import { shownName } from "./field-hint.js";
import { integerScalars, isDecimalInteger, isOverlongInteger } from "./json-codec.js";

/** The spellings of a boolean Go's strconv.ParseBool takes, which grpc-gateway reads query booleans with. */
const booleans: ReadonlyMap<string, boolean> = new Map([
  ...["1", "t", "T", "TRUE", "true", "True"].map((s) => [s, true] as const),
  ...["0", "f", "F", "FALSE", "false", "False"].map((s) => [s, false] as const),
]);

function scalarValue(key: string, type: ScalarType, text: string): JsonValue {
  if (type === ScalarType.BOOL) {
    const value = booleans.get(text);
    if (value === undefined) throw apiError("INVALID_ARGUMENT", { field: key, problem: `must be true or false (or 1 or 0), got "${text}"` });
    return value;
  }
  // What JSON's number parsing would also take (0x10, 1e1, +3) is not a proto3 JSON integer.
  if (integerScalars.has(type) && !isDecimalInteger(text)) {
    throw apiError("INVALID_ARGUMENT", { field: key, problem: `must be a whole number in decimal digits, got "${shownName(text)}"` });
  }
  if (integerScalars.has(type) && isOverlongInteger(text)) {
    throw apiError("INVALID_ARGUMENT", { field: key, problem: `${shownName(text)} is out of range: no whole number the API takes has more than 20 characters` });
  }
  const range = ranges32.get(type);
  if (range !== undefined && (BigInt(text) < range[0] || BigInt(text) > range[1])) {
    throw apiError("INVALID_ARGUMENT", { field: key, problem: `must be a whole number from ${range[0]} to ${range[1]}, got ${text}` });
  }
  return text;
}

/** The 32-bit integer types' ranges, said in the parameter's own words rather than the JSON reader's. */
const ranges32: ReadonlyMap<ScalarType, readonly [bigint, bigint]> = new Map([
  ...[ScalarType.INT32, ScalarType.SINT32, ScalarType.SFIXED32].map((t) => [t, [-(2n ** 31n), 2n ** 31n - 1n]] as const),
  ...[ScalarType.UINT32, ScalarType.FIXED32].map((t) => [t, [0n, 2n ** 32n - 1n]] as const),
]);

/** An enum by value name or number, as grpc-gateway takes it; only values the enum defines. */
function enumValue(key: string, desc: DescEnum, text: string): JsonValue {
  if (desc.values.some((v) => v.name === text)) return text;
  if (isDecimalInteger(text)) {
    const number = Number(text);
    if (desc.values.some((v) => v.number === number)) return number;
  }
  throw apiError("INVALID_ARGUMENT", { field: key, problem: `must be one of ${desc.values.map((v) => v.name).join(", ")} (or its number), got "${text}"` });
}

/** A field mask's paths as grpc-gateway takes them (field names) or as proto3 JSON writes them (lowerCamelCase). */
function fieldMaskValue(text: string): string {
  return text
    .split(",")
    .map((path) => path.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()))
    .join(",");
}

function oneValue(key: string, field: DescField, text: string): JsonValue {
  if (field.enum !== undefined) return enumValue(key, field.enum, text);
  if (field.scalar !== undefined) return scalarValue(key, field.scalar, text);
  const message = field.message!;
  if (message.typeName === "google.protobuf.FieldMask") return fieldMaskValue(text);
  const form = textForms.get(message.typeName);
  if (form !== undefined) {
    // Checked here, so that the error names the parameter rather than its top-level message.
    try {
      fromJson(message, text);
    } catch {
      throw apiError("INVALID_ARGUMENT", { field: key, problem: `must be ${form}, got "${text}"` });
    }
    return text;
  }
  // A wrapper's JSON is its value's.
  return scalarValue(key, message.fields[0]!.scalar!, text);
}

/** What the well-known types written as text look like, to say when one does not. */
const textForms: ReadonlyMap<string, string> = new Map([
  ["google.protobuf.Timestamp", "an RFC 3339 time such as 2024-01-02T03:04:05Z"],
  ["google.protobuf.Duration", 'seconds followed by "s", such as 1.5s'],
]);

/**
 * The proto3 JSON a query parameter gives its field (AIP-127, as
 * grpc-gateway reads it): text for strings, 64-bit integers, bytes and
 * well-known types, booleans and enums in any spelling grpc-gateway takes,
 * a list for a repeated field. A parameter given more than once is refused
 * unless its field is repeated.
 */
export function queryValue(key: string, field: DescField, values: readonly string[]): JsonValue {
  if (field.fieldKind === "list") return values.map((v) => oneValue(key, field, v));
  // http.proto repeats a parameter for repeated fields only.
  if (values.length > 1) throw apiError("INVALID_ARGUMENT", { field: key, problem: `is given ${values.length} times; give it once` });
  return oneValue(key, field, values[0]!);
}

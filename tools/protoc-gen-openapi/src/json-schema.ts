import { type DescEnum, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { requestFieldConstraints } from "../../../src/api/validate.js";
import { isInt64Field, writesInt64AsNumber } from "../../../src/rest/int64-json.js";
import { describe } from "./comments.js";
import type { Schema } from "./openapi.js";

/**
 * Where a message's JSON is read or written; each is written by different
 * code, so each has its own schema.
 * - answer: a REST answer (src/rest/json-codec.ts writeRestJson): fields
 *   with implicit presence are always there, 64-bit integers are numbers
 *   when exact.
 * - detail: an error detail inside an error body (src/rest/rest-error.ts):
 *   proto3 JSON as protobuf-es writes it, zero values left out, 64-bit
 *   integers as strings.
 * - request: a request body (fromJson): the fields marked
 *   `(google.api.field_behavior) = REQUIRED` are required (the RPC's own
 *   checks answer INVALID_ARGUMENT without them), 64-bit integers as
 *   numbers or strings.
 */
export type Form = "answer" | "detail" | "request";

/** Which form gets a message's plain component name when it appears in several. */
const formOrder: readonly Form[] = ["answer", "detail", "request"];

const maxSafe = Number.MAX_SAFE_INTEGER;
const signed64 = new Set([ScalarType.INT64, ScalarType.SINT64, ScalarType.SFIXED64]);

function subMessage(field: DescField): DescMessage | undefined {
  return field.fieldKind === "message" || field.fieldKind === "list" || field.fieldKind === "map" ? field.message : undefined;
}

/** A schema that an object has a key: the key defined where it is required, as strict validators ask. */
function has(key: string): Schema {
  // {} rather than the boolean schema true, which validates the same: some
  // generators (orval's zod client) read every subschema as an object.
  return { properties: { [key]: {} }, required: [key] };
}

/** Whether a message has a JSON form of its own (proto3 JSON's well-known types). */
function isWellKnown(message: DescMessage): boolean {
  return wellKnown(message, "answer") !== undefined;
}

function wrapperValue(message: DescMessage, form: Form): Schema {
  const field = message.fields[0]!;
  return scalar(field.scalar!, form, false);
}

/** The JSON form of a well-known type, as protobuf-es writes and reads it; undefined for other messages. */
function wellKnown(message: DescMessage, form: Form): Schema | undefined {
  switch (message.typeName) {
    case "google.protobuf.Timestamp":
      return { type: "string", format: "date-time" };
    case "google.protobuf.Duration":
      return { type: "string", pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$", examples: ["1.500s"] };
    case "google.protobuf.Struct":
      // Spelled out: without it openapi-typescript types the object as
      // Record<string, never>, which no value fits.
      return { type: "object", additionalProperties: true };
    case "google.protobuf.Value":
      return {};
    case "google.protobuf.ListValue":
      return { type: "array", items: {} };
    case "google.protobuf.FieldMask":
      return { type: "string", description: "Comma-separated lowerCamelCase field paths." };
    case "google.protobuf.Empty":
      return { type: "object", properties: {} };
    case "google.protobuf.Any":
      return { type: "object", required: ["@type"], properties: { "@type": { type: "string" } }, additionalProperties: true };
    case "google.protobuf.DoubleValue":
    case "google.protobuf.FloatValue":
    case "google.protobuf.Int64Value":
    case "google.protobuf.UInt64Value":
    case "google.protobuf.Int32Value":
    case "google.protobuf.UInt32Value":
    case "google.protobuf.BoolValue":
    case "google.protobuf.StringValue":
    case "google.protobuf.BytesValue":
      return wrapperValue(message, form);
    default:
      return undefined;
  }
}

/**
 * A scalar's JSON. 64-bit integers: in answers a JSON number while it is
 * exact in a double (|n| < 2^53), else a decimal string, which then has at
 * least 16 digits; in well-known types and error details always a string;
 * in requests either. Floats may be the strings NaN and ±Infinity.
 */
function scalar(type: ScalarType, form: Form, int64AsNumber: boolean): Schema {
  switch (type) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", format: "byte", contentEncoding: "base64" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", minimum: 0, maximum: 4294967295 };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return {
        oneOf: [
          { type: "number", format: type === ScalarType.FLOAT ? "float" : "double" },
          { type: "string", enum: ["NaN", "Infinity", "-Infinity"] },
        ],
      };
    default: {
      const signed = signed64.has(type);
      const sign = signed ? "-?" : "";
      if (form === "request") {
        // A JSON number beyond 2^53 - 1 would be read rounded, so the
        // service refuses it; a string holds any value of the type (at most
        // 20 digits past leading zeros, 256 characters in all).
        return {
          oneOf: [
            { type: "integer", format: "int64", minimum: signed ? -maxSafe : 0, maximum: maxSafe },
            { type: "string", pattern: `^${sign}0*[0-9]{1,20}$`, maxLength: 256, description: "Any value of the type, as a decimal string." },
          ],
        };
      }
      if (form === "detail" || !int64AsNumber) return { type: "string", format: "int64", pattern: `^${sign}[0-9]+$` };
      return {
        oneOf: [
          { type: "integer", format: "int64", minimum: signed ? -maxSafe : 0, maximum: maxSafe },
          { type: "string", pattern: `^${sign}[0-9]{16,20}$`, description: "Beyond 2^53 - 1, a decimal string." },
        ],
      };
    }
  }
}

/**
 * A request field's schema with the constraints the service checks on its
 * value (src/api/validate.ts), on each element of a repeated field. Only
 * string and integer fields take them: a name shared by a field of
 * another type says nothing of it.
 */
function constrained(field: DescField, schema: Schema): Schema {
  const constraint = requestFieldConstraints[field.name];
  if (constraint === undefined || (field.fieldKind !== "scalar" && field.fieldKind !== "list") || field.scalar === undefined) return schema;
  const fits = constraint.pattern !== undefined ? field.scalar === ScalarType.STRING : field.scalar === ScalarType.INT32;
  if (!fits) return schema;
  if (field.fieldKind === "list") return { ...schema, items: { ...(schema["items"] as Schema), ...constraint } };
  return { ...schema, ...constraint };
}

/**
 * A query parameter's value: text the gateway hands to the JSON reader
 * (booleans as true or false, enums by name), so a 64-bit integer is plain
 * digits here.
 */
export function queryValueSchema(field: DescField): Schema {
  let one: Schema;
  if (field.enum !== undefined) one = { type: "string", enum: field.enum.values.map((v) => v.name) };
  else if (field.message !== undefined) {
    // A wrapper is written as what it wraps; the others (Timestamp, Duration, FieldMask) as their JSON strings.
    const wrapped = field.message.typeName.endsWith("Value") ? field.message.fields[0] : undefined;
    one =
      wrapped !== undefined
        ? queryValueSchema(wrapped)
        : field.message.typeName === "google.protobuf.FieldMask"
          ? { type: "string", description: "Comma-separated field paths, by name (field_name) or JSON name (fieldName)." }
          : (wellKnown(field.message, "request") ?? {});
  } else {
    const type = field.scalar!;
    one = type === ScalarType.DOUBLE || type === ScalarType.FLOAT ? { type: "number" } : isInt64Field(field) ? { type: "integer", format: "int64" } : scalar(type, "request", false);
  }
  return constrained(field, field.fieldKind === "list" ? { type: "array", items: one } : one);
}

/** The JSON of a map key: always a string, of the key type's digits or words. */
function mapKey(type: ScalarType): Schema | undefined {
  switch (type) {
    case ScalarType.STRING:
      return undefined;
    case ScalarType.BOOL:
      return { enum: ["true", "false"] };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { pattern: "^[0-9]+$" };
    default:
      return { pattern: "^-?[0-9]+$" };
  }
}

/**
 * Whether a field is always in an answer: fields with implicit presence
 * (scalars and enums that are not `optional`, repeated fields and maps),
 * since the gateway writes them even when zero; message, `optional` and
 * oneof fields are left out when unset.
 */
export function alwaysInAnswers(field: DescField): boolean {
  if (field.oneof !== undefined) return false;
  if (field.fieldKind === "list" || field.fieldKind === "map") return true;
  return (field.fieldKind === "scalar" || field.fieldKind === "enum") && field.presence !== FeatureSet_FieldPresence.EXPLICIT;
}

function withDescription(schema: Schema, description: string | undefined): Schema {
  if (description === undefined) return schema;
  return { ...schema, description: schema["description"] === undefined ? description : `${description}\n\n${schema["description"] as string}` };
}

/**
 * The JSON Schemas of messages and enums, collected as components. A
 * message seen in several forms gets one component per form: the plain
 * name for the first of answer, detail, request; `-detail` and `-input`
 * suffixes (no proto name has a hyphen) for the others.
 */
export class SchemaSet {
  readonly #components = new Map<string, Schema>();
  readonly #forms = new Map<string, Set<Form>>();

  readonly #required: (field: DescField) => boolean;

  /**
   * Declares where messages are used, before any schema is asked for:
   * names depend on it. `required` says which fields a request must set.
   */
  constructor(roots: ReadonlyArray<{ message: DescMessage; form: Form }>, required: (field: DescField) => boolean = () => false) {
    this.#required = required;
    const visit = (message: DescMessage, form: Form) => {
      if (isWellKnown(message)) return;
      let forms = this.#forms.get(message.typeName);
      if (forms === undefined) this.#forms.set(message.typeName, (forms = new Set()));
      if (forms.has(form)) return;
      forms.add(form);
      for (const field of message.fields) {
        const sub = subMessage(field);
        if (sub !== undefined) visit(sub, form);
      }
    };
    for (const root of roots) visit(root.message, root.form);
  }

  /** The component name of a message in a form. */
  name(message: DescMessage, form: Form): string {
    const forms = this.#forms.get(message.typeName);
    if (forms === undefined || !forms.has(form)) throw new Error(`${message.typeName} was not declared in form ${form}`);
    const first = formOrder.find((f) => forms.has(f));
    return form === first ? message.typeName : `${message.typeName}-${form === "request" ? "input" : form}`;
  }

  /** A message's schema: a reference to its component, or a well-known type's inline form. */
  message(message: DescMessage, form: Form): Schema {
    const known = wellKnown(message, form);
    if (known !== undefined) return known;
    const name = this.name(message, form);
    if (!this.#components.has(name)) {
      this.#components.set(name, {}); // placeholder: recursive messages refer to themselves
      this.#components.set(name, this.object(message, form, message.fields));
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /**
   * An object schema of some of a message's fields: a message, or a request
   * body without its path fields. `alsoNamed`: fields a request body may
   * repeat without describing them (a path's, which the service takes there
   * when its value is the path's).
   */
  object(message: DescMessage, form: Form, fields: readonly DescField[], alsoNamed: readonly DescField[] = []): Schema {
    const properties: Record<string, Schema> = {};
    for (const field of fields) properties[field.name] = this.field(field, form);
    const mustHave = fields.filter(form === "answer" ? alwaysInAnswers : form === "request" ? this.#required : () => false);
    // A request's unknown keys are refused, as protojson refuses them; its
    // fields go by either JSON name. An answer stays open, so that clients
    // survive fields added later.
    const names = [...new Set([...fields, ...alsoNamed].flatMap((f) => [f.name, f.jsonName]))];
    const closed: Schema = form !== "request" ? {} : names.length === 0 ? { maxProperties: 0 } : { propertyNames: { enum: names } };
    // A request field spelt in lowerCamelCase is held to its field's schema,
    // and a required one may be given so: a validating gateway takes what
    // the service takes. Said with keywords that validate and that client
    // generators pass over (dependentSchemas, not), so generated models keep
    // one property per field, the proto's name.
    const twinned = form === "request" ? fields.filter((f) => f.jsonName !== f.name) : [];
    const required = mustHave.filter((f) => !twinned.includes(f)).map((f) => f.name);
    const eitherRequired = mustHave.filter((f) => twinned.includes(f));
    const spellings: Schema =
      twinned.length === 0
        ? {}
        : {
            dependentSchemas: Object.fromEntries(
              twinned.map((f) => [f.jsonName, { properties: { [f.jsonName]: properties[f.name] }, not: has(f.name) }]),
            ),
          };
    // Refused: a body that lacks some required field in both spellings.
    const lacksEither = eitherRequired.map((f) => ({ not: { anyOf: [has(f.name), has(f.jsonName)] } }));
    const lacking: Schema = lacksEither.length === 0 ? {} : { not: lacksEither.length === 1 ? lacksEither[0] : { anyOf: lacksEither } };
    return {
      type: "object",
      ...(describe(message) === undefined ? {} : { description: describe(message) }),
      properties,
      ...(required.length === 0 ? {} : { required }),
      ...lacking,
      ...spellings,
      ...closed,
    };
  }

  /** Registers a component made elsewhere (a request body, the error bodies); its name must be free. */
  add(name: string, schema: Schema): Schema {
    if (this.#components.has(name)) throw new Error(`two schemas are named ${name}`);
    this.#components.set(name, schema);
    return { $ref: `#/components/schemas/${name}` };
  }

  /** A component made elsewhere, made once under its name however often it is asked for. */
  reuse(name: string, make: () => Schema): Schema {
    if (!this.#components.has(name)) this.#components.set(name, make());
    return { $ref: `#/components/schemas/${name}` };
  }

  /** An enum's schema: a reference to its component, whose values are the names (null for NullValue). */
  enum(desc: DescEnum): Schema {
    if (desc.typeName === "google.protobuf.NullValue") return { type: "null" };
    const name = desc.typeName;
    if (!this.#components.has(name)) {
      const values = desc.values.map((v) => `- \`${v.name}\`${describe(v) === undefined ? "" : `: ${describe(v)!.replace(/\s+/g, " ")}`}`);
      const text = [describe(desc), values.join("\n")].filter((t) => t !== undefined && t !== "").join("\n\n");
      this.#components.set(name, { type: "string", description: text, enum: desc.values.map((v) => v.name) });
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /** The schema of an element of a list or a value of a map. */
  #element(field: DescField & { fieldKind: "list" | "map" }, form: Form): Schema {
    if (field.scalar !== undefined) return scalar(field.scalar, form, writesInt64AsNumber(field.parent));
    return field.enum !== undefined ? this.enum(field.enum) : this.message(field.message!, form);
  }

  /** The schema of one field's JSON value, with the field's comment. */
  field(field: DescField, form: Form): Schema {
    const int64AsNumber = writesInt64AsNumber(field.parent);
    let schema: Schema;
    switch (field.fieldKind) {
      case "scalar":
        schema = scalar(field.scalar, form, int64AsNumber);
        break;
      case "enum":
        schema = this.enum(field.enum);
        break;
      case "message":
        schema = this.message(field.message, form);
        break;
      case "list":
        schema = { type: "array", items: this.#element(field, form) };
        break;
      case "map": {
        const key = mapKey(field.mapKey);
        schema = { type: "object", ...(key === undefined ? {} : { propertyNames: key }), additionalProperties: this.#element(field, form) };
        break;
      }
    }
    if (form === "request") schema = constrained(field, schema);
    let description = describe(field);
    if (field.oneof !== undefined) {
      const members = field.oneof.fields.map((f) => `\`${f.name}\``).join(", ");
      description = `${description ?? ""}${description === undefined ? "" : "\n\n"}At most one of ${members} is set (oneof \`${field.oneof.name}\`).`;
    }
    if (isInt64Field(field) && form === "answer" && int64AsNumber) {
      // The number-or-string choice is the gateway's, so say it where a reader looks.
      description = `${description ?? ""}${description === undefined ? "" : " "}A JSON number up to 2^53 - 1, a string beyond.`;
    }
    return withDescription(schema, description);
  }

  /** The components, sorted by name so that the output does not depend on traversal order. */
  components(): Record<string, Schema> {
    return Object.fromEntries([...this.#components.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}

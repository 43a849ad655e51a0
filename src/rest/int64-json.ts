import { type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";

const int64Types: ReadonlySet<ScalarType> = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);

/** Whether a field holds 64-bit integers: singular, repeated, or as map values. */
export function isInt64Field(field: DescField): boolean {
  return field.scalar !== undefined && int64Types.has(field.scalar);
}

/**
 * Whether the REST gateway writes this message's 64-bit integer fields as
 * JSON numbers when they are exact in a double. Well-known types keep their
 * own JSON form, so an Int64Value stays a string, as in proto3 JSON.
 */
export function writesInt64AsNumber(message: DescMessage): boolean {
  return !message.typeName.startsWith("google.protobuf.");
}

function subMessage(field: DescField): DescMessage | undefined {
  return field.fieldKind === "message" || field.fieldKind === "list" || field.fieldKind === "map" ? field.message : undefined;
}

// A depth-first search with one visited set answers reachability exactly;
// only whole answers are cached, never one cut short by a cycle.
function reaches(message: DescMessage, seen: Set<string>): boolean {
  if (!writesInt64AsNumber(message) || seen.has(message.typeName)) return false;
  seen.add(message.typeName);
  return message.fields.some((f) => isInt64Field(f) || (subMessage(f) !== undefined && reaches(subMessage(f)!, seen)));
}

const reachCache = new Map<string, boolean>();
const plans = new Map<string, readonly DescField[]>();

function reachesInt64(message: DescMessage): boolean {
  let answer = reachCache.get(message.typeName);
  if (answer === undefined) reachCache.set(message.typeName, (answer = reaches(message, new Set())));
  return answer;
}

/**
 * The fields of a message whose JSON holds, here or below, a 64-bit integer
 * the gateway writes as a number; computed once per type, since answers are
 * rendered on the hot path. Recursive messages are followed to any depth.
 */
export function int64NumberFields(message: DescMessage): readonly DescField[] {
  let plan = plans.get(message.typeName);
  if (plan === undefined) {
    plan = writesInt64AsNumber(message) ? message.fields.filter((f) => isInt64Field(f) || (subMessage(f) !== undefined && reachesInt64(subMessage(f)!))) : [];
    plans.set(message.typeName, plan);
  }
  return plan;
}

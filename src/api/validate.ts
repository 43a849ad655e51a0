import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { type ParsedUploadPath, parseUploadPath } from "../blob/blob-paths.js";
import {
  entityIdPattern,
  isServiceSlug,
  principalIdMaxLength,
  principalIdShape,
  serviceSlugMaxLength,
  serviceSlugShape,
  sourceHashPattern,
  versionIdPattern,
} from "../domain/identifiers.js";
import type { Limits as ConfigLimits } from "../config.js";
import { jsonShape } from "../domain/version-data-cost.js";
import { isVersionString, versionStringPattern } from "../domain/version-string.js";
import { apiError } from "../errors/api-error.js";

/** Bounds on request values, from the configuration. */
export type Limits = Pick<ConfigLimits, "maxPackageBytes" | "maxPackageJsonBytes" | "maxPackageJsonValues" | "maxServiceDependencies">;

/** Page sizes of ListVersions and ListEvents (AIP-158). */
export const defaultPageSize = 50;
export const maxPageSize = 1000;

function invalid(field: string, problem: string) {
  return apiError("INVALID_ARGUMENT", { field, problem });
}

function show(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}

/** An entity id, checked before it reaches SQL or a blob path. */
export function entityId(value: string): string {
  if (value === "") throw invalid("entity_id", "is required");
  if (!entityIdPattern.test(value)) {
    throw invalid("entity_id", `${show(value)} must be 1 to 128 letters, digits, "_" or "-", starting with a letter or digit`);
  }
  return value;
}

/** A version id that must be given. */
export function versionId(value: string, field = "version_id"): string {
  if (value === "") throw invalid(field, "is required");
  if (!versionIdPattern.test(value)) {
    // The usual slip: the version string (2026.11.21-093000) where its id belongs.
    const hint = isVersionString(value) ? "; that is a version string: pass the version's id, which ListVersions answers with each version (`id`)" : ": version ids are UUIDs, as ListVersions answers them (`id`)";
    throw invalid(field, `${show(value)} is not a version id${hint}`);
  }
  return value;
}

/** base_version_id: "" when omitted (a first push), else a version id. */
export function baseVersionId(value: string): string {
  return value === "" ? "" : versionId(value, "base_version_id");
}

/** A version string, YYYY.MM.DD-HHMMSS naming a real date and time. */
export function versionString(value: string): string {
  if (value === "") throw invalid("version", "is required");
  if (!isVersionString(value)) {
    throw invalid("version", `${show(value)} must be YYYY.MM.DD-HHMMSS and a real date and time, e.g. 2026.11.21-093000`);
  }
  return value;
}

/** A source hash: lowercase hex SHA-1, SHA-256, SHA-384 or SHA-512. */
export function sourceHash(value: string): string {
  if (value === "") throw invalid("source_hash", "is required");
  if (!sourceHashPattern.test(value)) {
    throw invalid("source_hash", "must be a lowercase hex SHA digest of 40, 64, 96 or 128 characters");
  }
  return value;
}

/** A blob path this service issued for this entity's upload. */
export function uploadPath(value: string, field: string, entity: string, file: ParsedUploadPath["file"]): ParsedUploadPath {
  if (value === "") throw invalid(field, "is required");
  const parsed = parseUploadPath(value);
  // A version's own (final) path is never an upload path: nothing is uploaded there.
  if (parsed === undefined || parsed.area === "final" || parsed.entityId !== entity || parsed.file !== file) {
    const which = file === "package" ? "storage_path" : "package_lock_path";
    throw invalid(field, `${show(value)} is not a path this service issued for entity "${entity}": pass the ${which} that upload-url returned`);
  }
  return parsed;
}

/** file_size_bytes: at least 1 and at most the configured maximum. */
export function fileSize(value: bigint, limits: Limits): number {
  if (value < 1n) throw invalid("file_size_bytes", "must be at least 1 (the size of the uploaded package in bytes)");
  if (value > BigInt(limits.maxPackageBytes)) {
    throw invalid("file_size_bytes", `${value} is more than the maximum package size of ${limits.maxPackageBytes} bytes (the service's MAX_PACKAGE_BYTES): make the package smaller, leaving out what it need not hold`);
  }
  return Number(value);
}

/** service_dependencies: distinct service slugs, a bounded number of them. */
export function serviceDependencies(values: readonly string[], limits: Limits): string[] {
  if (values.length > limits.maxServiceDependencies) {
    throw invalid("service_dependencies", `has ${values.length} entries; at most ${limits.maxServiceDependencies} are allowed`);
  }
  const seen = new Set<string>();
  for (const slug of values) {
    if (!isServiceSlug(slug)) {
      throw invalid("service_dependencies", `${show(slug)} is not a service slug (lowercase letters and digits joined by single hyphens, up to 63 characters)`);
    }
    if (seen.has(slug)) throw invalid("service_dependencies", `lists ${show(slug)} twice`);
    seen.add(slug);
  }
  return [...seen];
}

/** package_json: any JSON object, bounded in size. */
export function packageJson(value: JsonObject | undefined, limits: Pick<Limits, "maxPackageJsonBytes" | "maxPackageJsonValues">): JsonObject | undefined {
  if (value === undefined) return undefined;
  const unstorable = unstorableValue(value, "package_json");
  if (unstorable !== undefined) throw invalid("package_json", unstorable);
  const size = Buffer.byteLength(JSON.stringify(value));
  if (size > limits.maxPackageJsonBytes) {
    throw invalid("package_json", `is ${size} bytes of JSON; at most ${limits.maxPackageJsonBytes} are allowed`);
  }
  const shape = jsonShape(value);
  if (shape.depth > maxPackageJsonDepth) {
    throw invalid("package_json", `nests ${shape.depth} levels deep; at most ${maxPackageJsonDepth} are allowed`);
  }
  if (shape.values > limits.maxPackageJsonValues) {
    throw invalid("package_json", `holds ${shape.values} JSON values (objects, arrays, strings, numbers, booleans and nulls); at most ${limits.maxPackageJsonValues} are allowed`);
  }
  return value;
}

/**
 * How deep package_json may nest. In protobuf an object's level is three
 * messages (a Value, its Struct and the map entry) and an array's two (a
 * Value and its ListValue), and decoders stop at 100 (protobuf-es,
 * grpc-js's protobufjs): a deeper manifest would be stored, and then
 * unreadable by every binary client of the versions around it.
 */
export const maxPackageJsonDepth = 32;

/**
 * The first value of package_json that would not be stored as it was
 * sent, or not accepted alike on every protocol, and why, or undefined. A
 * published version's manifest must read back the same on every
 * protocol: a number JSON has no form for would be
 * stored as null, and a lone UTF-16 surrogate (`"\ud800"` in JSON) is no
 * text UTF-8 can carry, so gRPC would answer U+FFFD where REST answers the
 * escape. A key REST's JSON parser refuses in any body as prototype
 * poisoning ("__proto__", or "constructor" holding an object with
 * "prototype") is refused here too: Connect and gRPC decode it as any
 * other. (An integer JSON rounds is refused where the JSON text is read:
 * see checkJsonText.)
 */
function unstorableValue(value: JsonValue, path: string): string | undefined {
  if (typeof value === "number") {
    return Number.isFinite(value) ? undefined : `${path} is not a finite number (a JSON number out of range, or NaN or Infinity over gRPC); send it as a string`;
  }
  if (typeof value === "string") return value.isWellFormed() ? undefined : `${path} holds a lone UTF-16 surrogate (such as "\\ud800"), which is not text; send well-formed Unicode`;
  if (value === null || typeof value !== "object") return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = unstorableValue(value[i]!, `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, member] of Object.entries(value)) {
    if (!key.isWellFormed()) return `a key of ${path} holds a lone UTF-16 surrogate (such as "\\ud800"), which is not text; send well-formed Unicode`;
    if (key === "__proto__") return `${path} has a "__proto__" key, ${prototypePoisoning}`;
    if (key === "constructor" && member !== null && typeof member === "object" && Object.hasOwn(member, "prototype")) {
      return `${path} has a "constructor" key holding "prototype", ${prototypePoisoning}`;
    }
    const found = unstorableValue(member, `${path}.${key}`);
    if (found !== undefined) return found;
  }
  return undefined;
}

const prototypePoisoning = "which the REST gateway refuses in any body as prototype poisoning: remove it (or rename it)";

const eventIdPattern = /^[0-9]{1,16}$/;

/**
 * An event id a client passed back (after_event_id): the number of an
 * event of the entity, as Event.id and Bookmark.last_event_id carry it;
 * undefined when empty.
 */
export function eventId(value: string, field: string): number | undefined {
  if (value === "") return undefined;
  const seq = eventIdPattern.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(seq)) {
    throw invalid(field, `${show(value)} is not an event id: pass the id of an event or bookmark this entity's events carried`);
  }
  return seq;
}

/** page_size per AIP-158: negative is an error, 0 the default, above the maximum the maximum. */
export function pageSize(value: number): number {
  if (value < 0) throw invalid("page_size", `must not be negative: give 1 to ${maxPageSize}, or 0 (or none) for the default of ${defaultPageSize}`);
  return value === 0 ? defaultPageSize : Math.min(value, maxPageSize);
}

/** A JSON Schema constraint on a request field's value (of each element, for a repeated field). */
export interface FieldConstraint {
  /** An ECMA-262 regular expression the whole value matches. */
  readonly pattern?: string;
  /** The most characters of a string. */
  readonly maxLength?: number;
  /** The least value of an integer. */
  readonly minimum?: number;
}

/** A pattern that also admits "", for fields whose empty value means "not given". */
const orEmpty = (pattern: RegExp) => `^$|${pattern.source}`;

/**
 * What the OpenAPI document states of request fields, by field name, so
 * that generated clients refuse a bad value before sending it: the
 * patterns and bounds the checks above apply, read from the same
 * constants, and no stricter (a version string must also name a real
 * date, a service slug list must not repeat itself). A contract test
 * (test/contract/openapi.ts) sends every operation a value outside each
 * constraint the document states and expects INVALID_ARGUMENT naming the
 * field.
 */
export const requestFieldConstraints: Readonly<Record<string, FieldConstraint>> = Object.freeze({
  entity_id: { pattern: entityIdPattern.source },
  version_id: { pattern: versionIdPattern.source },
  base_version_id: { pattern: orEmpty(versionIdPattern) },
  expected_active_version_id: { pattern: orEmpty(versionIdPattern) },
  version: { pattern: versionStringPattern.source },
  source_hash: { pattern: sourceHashPattern.source },
  service_dependencies: { pattern: serviceSlugShape.source, maxLength: serviceSlugMaxLength },
  after_event_id: { pattern: orEmpty(eventIdPattern) },
  page_size: { minimum: 0 },
  user_id: { pattern: principalIdShape.source, maxLength: principalIdMaxLength },
  org_id: { pattern: principalIdShape.source, maxLength: principalIdMaxLength },
});

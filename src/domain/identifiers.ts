/**
 * Entity ids: 1 to 128 ASCII letters, digits, "_" and "-", starting with a
 * letter or digit. They become blob path segments and SQL values, so no
 * dots, slashes or anything a URL or path would reinterpret.
 */
export const entityIdPattern = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

/** Version ids (UUIDs here, but any 1 to 64 ASCII letters, digits, "_" and "-" are looked up). */
export const versionIdPattern = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Source hashes: a lowercase hex SHA digest, SHA-1 (40), SHA-256 (64),
 * SHA-384 (96) or SHA-512 (128 characters).
 */
export const sourceHashPattern = /^(?:[0-9a-f]{40}|[0-9a-f]{64}|[0-9a-f]{96}|[0-9a-f]{128})$/;

/**
 * Service slugs in service_dependencies: lowercase words joined by single
 * hyphens (serviceSlugShape), up to serviceSlugMaxLength characters. Two
 * parts rather than one lookahead, so that the OpenAPI document can state
 * them in forms every regex engine reads (RE2 has no lookahead).
 */
export const serviceSlugShape = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;
export const serviceSlugMaxLength = 63;

/** Whether a string is a service slug. */
export function isServiceSlug(value: string): boolean {
  return value.length <= serviceSlugMaxLength && serviceSlugShape.test(value);
}

/**
 * User and organization ids: printable, no spaces, at most 255 characters
 * (they appear in REST paths). Never U+FFFD: a JSON or protobuf decoder puts
 * it in place of bytes that were not UTF-8, so an id holding it is not the
 * one its sender meant. Never "." or "..": as path segments, clients and
 * proxies resolve them away (RFC 3986, 5.2.4), so such an id could be added
 * but not removed.
 */
export const principalIdPattern = /^(?!\.\.?$)[^\s\p{C}\uFFFD]{1,255}$/u;

/** The most characters of a user or organization id, as principalIdPattern counts them. */
export const principalIdMaxLength = 255;

/**
 * What the OpenAPI document states of principalIdPattern: no white space,
 * in a form every regex engine reads (Python's re has no \p{…}, RE2 no
 * lookahead). Looser than the pattern, never stricter.
 */
export const principalIdShape = /^\S+$/;

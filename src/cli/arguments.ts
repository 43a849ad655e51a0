import { InvalidArgumentError } from "commander";
import { entityIdPattern, principalIdPattern, versionIdPattern } from "../domain/identifiers.js";
import { isVersionString } from "../domain/version-string.js";

// Argument checks run by commander as it parses, with the service's own
// rules (src/domain), so a malformed id is a usage error (exit 2) before
// any call rather than a round trip to a 400.

/** An entity id argument or option. */
export function parseEntityId(value: string): string {
  if (!entityIdPattern.test(value)) {
    throw new InvalidArgumentError(`entity ids are 1-128 ASCII letters, digits, "_" and "-", starting with a letter or digit (INVALID_ARGUMENT).`);
  }
  return value;
}

/** A user or organization id argument or option (a token's `sub` or one of its `orgs`). */
export function parsePrincipalId(value: string): string {
  if (!principalIdPattern.test(value)) {
    throw new InvalidArgumentError(`user and organization ids are 1-255 printable characters without spaces, and not . or .. (INVALID_ARGUMENT).`);
  }
  return value;
}

/** A version id argument or option (the `id` of a version, not its version string). */
export function parseVersionId(value: string): string {
  if (!versionIdPattern.test(value)) {
    const said = isVersionString(value) ? `"${value}" is a version string, not a version id: ` : "";
    throw new InvalidArgumentError(`${said}version ids are 1-64 ASCII letters, digits, "_" and "-"; \`entity-versions list ENTITY\` shows them beside the version strings (INVALID_ARGUMENT).`);
  }
  return value;
}

/** A version string option (`--version`). */
export function parseVersionString(value: string): string {
  if (!isVersionString(value)) {
    throw new InvalidArgumentError(`a version is YYYY.MM.DD-HHMMSS naming a real UTC date and time, e.g. 2026.11.22-101500 (INVALID_ARGUMENT).`);
  }
  return value;
}

/** A positive page size. */
export function parsePageSize(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new InvalidArgumentError("a page size is a whole number from 1 to 1000.");
  return n;
}

import { ExitCode, type ExitCodeValue, exitCodeForServiceError } from "./exit-codes.js";

/**
 * An error the CLI reports and exits on: a message that says what to do, a
 * stable code (the service's own, or one of the CLI's like NO_TOKEN), the
 * exit code, and for `--json` the document printed on stderr (the service's
 * error body as it came, when the service answered).
 */
export class CliError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly exitCode: ExitCodeValue = ExitCode.failure,
    readonly body: Record<string, unknown> = { error: message, code },
    /** Further lines printed under the message in human output (hints, the tip of a STALE_BASE). */
    readonly hints: readonly string[] = [],
  ) {
    super(message);
    this.name = "CliError";
  }
}

/**
 * An error answer of the REST API, with its HTTP status and body, so
 * commands can act on the code (STALE_BASE, VERSION_ALREADY_EXISTS) and the
 * rest is reported as the service wrote it.
 */
export class ServiceError extends CliError {
  constructor(
    readonly status: number,
    code: string,
    message: string,
    body: Record<string, unknown>,
    /** Lines about this call, after the code's own hints (where the token and URL came from). */
    context: readonly string[] = [],
    /** The entity the call was about, written into the hints in place of ENTITY so that they can be typed as they stand. */
    entityId?: string,
  ) {
    const hints = status === 401 ? [tokenHint] : (hintsByCode[code] ?? []).map((h) => (entityId === undefined ? h : h.replace(/\bENTITY\b/g, entityId)));
    super(message, code, exitCodeForServiceError(code, status), body, [...hints, ...context]);
    this.name = "ServiceError";
  }
}

const tokenHint =
  "The service refused the token: pass a valid one with --token or ENTITY_VERSIONS_TOKEN (`entity-versions whoami` shows what it holds).";

/** A route the service does not have: the CLI was pointed at a page under the service, or at an older one. */
const wrongRoot =
  "the CLI calls the API under the service's root URL: check that --url (or ENTITY_VERSIONS_URL) is that root, e.g. http://localhost:8080, not a page under it such as /docs; else the service is older than this CLI.";

/** What to type next, for the service errors whose own message speaks REST (ENTITY: the call's entity, when known). */
const hintsByCode: Readonly<Record<string, string[]>> = {
  ROUTE_NOT_FOUND: [wrongRoot],
  METHOD_NOT_ALLOWED: [wrongRoot],
  NO_ACTIVE_VERSION: ["activate one with `entity-versions activate ENTITY VERSION_ID` (`entity-versions list ENTITY` shows the ids)."],
  ACTIVE_VERSION_NOT_DELETABLE: ["activate another version first with `entity-versions activate ENTITY VERSION_ID`."],
  VERSION_ALREADY_EXISTS: ["choose another --version, or leave it out to use the current time."],
  EVENTS_EXPIRED: ["watch without --after to follow from now and, once it says it is watching, read what is active (`entity-versions list ENTITY`); `entity-versions events ENTITY` lists the events still kept."],
  ACTIVE_VERSION_CHANGED: ['`entity-versions list ENTITY` marks the version now active (*); decide against it, then retry with --expect-active set to it (--expect-active "" when none is).'],
};

/** A usage error (exit 2): a flag or argument the CLI can tell is wrong before calling anything. */
export function usageError(message: string, code = "INVALID_ARGUMENT"): CliError {
  return new CliError(message, code, ExitCode.usage);
}

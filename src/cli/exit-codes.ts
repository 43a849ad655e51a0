/**
 * The CLI's exit codes. Scripts branch on them, so a code's meaning never
 * changes: 3 is the one a publishing or deploying pipeline waits for
 * (someone else changed the entity since you read it: reconcile and try
 * again), 4 the one that says "check the entity id, the version id or your
 * access" rather than "retry".
 */
export const ExitCode = Object.freeze({
  ok: 0,
  failure: 1,
  usage: 2,
  conflict: 3,
  noAccess: 4,
});

/** Service error codes that mean "the entity changed since you read it": STALE_BASE (push) and ACTIVE_VERSION_CHANGED (activate, rollback). */
const conflictCodes = new Set(["STALE_BASE", "ACTIVE_VERSION_CHANGED"]);

/** One of the values of {@link ExitCode}. */
export type ExitCodeValue = (typeof ExitCode)[keyof typeof ExitCode];

/**
 * Service error codes that mean "not found or no access". The service
 * answers ENTITY_NOT_FOUND both for an entity that does not exist and for one
 * the caller may not see, so the CLI cannot tell them apart either; a token
 * that is missing, expired or not accepted (every 401) is no access too.
 */
const noAccessCodes = new Set(["ENTITY_NOT_FOUND", "VERSION_NOT_FOUND", "NO_ACTIVE_VERSION", "PERMISSION_DENIED"]);

/** The exit code for an error the service answered, from its `code` and HTTP status. */
export function exitCodeForServiceError(code: string, status: number): ExitCodeValue {
  if (conflictCodes.has(code)) return ExitCode.conflict;
  if (noAccessCodes.has(code) || status === 401) return ExitCode.noAccess;
  return ExitCode.failure;
}

/** The table printed by `--help` and written in the README, kept next to the codes it describes. */
export const exitCodeHelp = `Exit codes:
  0  success (a push of source that is already published is success)
  1  failure (the service's error code is printed; the service unreachable)
  2  usage: unknown command or option, a missing or malformed argument (a --page-token too)
  3  the entity changed since you read it: STALE_BASE (another version was published after
     your base; reconcile and push again) or ACTIVE_VERSION_CHANGED (another version was
     activated since you read the active one; look again, then retry)
  4  not found or no access: ENTITY_NOT_FOUND, VERSION_NOT_FOUND, NO_ACTIVE_VERSION,
     PERMISSION_DENIED, or no usable token (missing, malformed, expired, refused)
  130, 143  interrupted (Ctrl-C, SIGTERM): scratch files removed; run it again`;

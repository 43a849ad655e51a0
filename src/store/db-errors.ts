/** How a database error should be answered. */
export type DbErrorKind = "unavailable" | "timeout" | "busy" | "other";

const unavailableCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "EAI_AGAIN",
  "PROTOCOL_CONNECTION_LOST",
  "PROTOCOL_SEQUENCE_TIMEOUT",
  "ER_CON_COUNT_ERROR",
  "ER_SERVER_SHUTDOWN",
  "ER_CONNECTION_KILLED",
  "ER_QUERY_INTERRUPTED",
  "ER_ACCESS_DENIED_ERROR",
  "ER_BAD_DB_ERROR",
  // A server that refuses writes (read_only): a primary demoted by a
  // failover or switchover, whose connections outlive it. Retry: the
  // connections are replaced (openDatabase) and find the new primary.
  "ER_OPTION_PREVENTS_STATEMENT",
  "ER_READ_ONLY_MODE",
  "SQLITE_BUSY",
  "SQLITE_BUSY_TIMEOUT",
  "SQLITE_CANTOPEN",
]);

/**
 * ER_CHECKREAD (1020, "Record has changed since last read"): MariaDB with
 * innodb_snapshot_isolation (on by default from 11.6) refuses a write to a
 * row changed since the transaction's snapshot, as a deadlock is refused:
 * rolled back and tried again, the transaction reads the row as it is now.
 */
const busyCodes = new Set(["ER_LOCK_DEADLOCK", "ER_LOCK_WAIT_TIMEOUT", "ER_CHECKREAD"]);

/**
 * SQLite's extended busy and locked codes (SQLITE_BUSY_SNAPSHOT: another
 * connection wrote since this transaction's snapshot; SQLITE_LOCKED…): the
 * statement failed, and once the transaction is rolled back (inTransaction
 * does) a retry can succeed, as after a deadlock. Plain SQLITE_BUSY, and
 * SQLITE_BUSY_TIMEOUT, are the busy timeout spent: unavailable.
 */
const sqliteBusy = /^SQLITE_(?:BUSY_(?!TIMEOUT)|LOCKED)/;

/** MariaDB's max_statement_time and MySQL's max_execution_time. */
const timeoutCodes = new Set(["ER_STATEMENT_TIMEOUT", "ER_QUERY_TIMEOUT"]);
const timeoutErrnos = new Set([1969, 3024]);

/**
 * Sorts a database error into what the client can do about it: the
 * database is unreachable (retry later), a statement ran out of time (the
 * server is struggling: retry later), busy with conflicting locks (retry
 * now), or anything else (a bug: internal error): what the answers, the
 * read batcher and the confirm grouper ask. (A unique-key violation the
 * store expects, a version string taken, is told apart where it is
 * expected, in the version store.)
 */
export function classifyDbError(error: unknown): DbErrorKind {
  for (let e: unknown = error, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const { code, errno, name, fatal } = e as { code?: string; errno?: number; name?: string; fatal?: boolean };
    if (code !== undefined && (busyCodes.has(code) || sqliteBusy.test(code))) return "busy";
    if ((code !== undefined && timeoutCodes.has(code)) || (errno !== undefined && timeoutErrnos.has(errno))) return "timeout";
    if ((code !== undefined && unavailableCodes.has(code)) || name === "KnexTimeoutError" || fatal === true) {
      return "unavailable";
    }
    e = (e as { cause?: unknown }).cause;
  }
  return "other";
}

const readOnlyCodes = new Set(["ER_OPTION_PREVENTS_STATEMENT", "ER_READ_ONLY_MODE"]);

/**
 * Whether MySQL refused a statement because it is read-only: the server
 * this connection reached is no longer the primary (or not yet).
 */
export function isReadOnlyRefusal(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const { code } = e as { code?: string };
    if (code !== undefined && readOnlyCodes.has(code)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Whether SQLite refused a write because its file (or the folder its
 * journal goes in) is read-only to this process. Knex's migration lock
 * keeps only the message of the error it wraps, so the message is read
 * too.
 */
export function isSqliteReadOnly(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === "string" && code.startsWith("SQLITE_READONLY")) return true;
    if (typeof message === "string" && /attempt to write a readonly database/.test(message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Whether an error says the connection was lost before the server
 * answered (so what was sent may have run): mysql2 marks such errors fatal
 * (PROTOCOL_CONNECTION_LOST, or the socket's own ECONNRESET, ETIMEDOUT,
 * EHOSTUNREACH…). Not an answer from the server (a known failure), not a
 * write that failed (the statement never left), not a connection already
 * closed before anything was sent (mysql2: "in closed state"), and never
 * SQLite's (in-process: a COMMIT that failed did not happen).
 */
export function lostBeforeAnswer(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const { code, message, fatal, syscall } = e as { code?: string; message?: string; fatal?: boolean; syscall?: string };
    if ((typeof message === "string" && /in closed state/.test(message)) || syscall === "write") return false;
    if (code?.startsWith("SQLITE_") === true) return false;
    if (fatal === true || code === "PROTOCOL_CONNECTION_LOST") return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * The connection failed after COMMIT was sent, so whether the change was
 * made is unknown: it may have landed. Told apart from an outage before the
 * commit, which changed nothing, so that the caller is not told "nothing
 * was changed" of a change that was made (a retried delete would then find
 * its version gone). `cause` is the database's error.
 */
export class CommitOutcomeUnknownError extends Error {
  override name = "CommitOutcomeUnknownError";
  constructor(cause: unknown) {
    super("the connection failed after COMMIT was sent: the change may have been made", { cause });
  }
}

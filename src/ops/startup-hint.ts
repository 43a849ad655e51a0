import { dirname, resolve, sep } from "node:path";
import { BlobStoreUnavailableError } from "../blob/blob-store.js";
import type { DatabaseConfig } from "../config.js";
import { classifyDbError, isReadOnlyRefusal, isSqliteReadOnly } from "../store/db-errors.js";
import { migrationLockAdvice } from "../store/migrate.js";

/** Where the service was told to listen and what database it was given, as the hints name them. */
export interface StartupSettings {
  readonly host: string;
  readonly port: number;
  readonly databaseName?: string;
  /** Which database DATABASE_URL names: the hints for one would mislead about the other. */
  readonly databaseKind: "mysql" | "sqlite";
  /** The SQLite file and the setting that named it: a hint tells the one that was set to change. */
  readonly sqlite?: { readonly file: string; readonly setting: "DATA_DIR" | "DATABASE_URL" };
}

/**
 * What the hints need to know of the database settings: its kind, the
 * MySQL database's name as the server knows it (decoded from the URL, as
 * the connection decodes it: a hint's CREATE DATABASE of the name as
 * written, "%C3%A9" for "é", would make another database), or the SQLite
 * file and the setting that named it. One reading, for every command that
 * stops on a database error.
 */
export function databaseHintSettings(database: DatabaseConfig): Pick<StartupSettings, "databaseKind" | "databaseName" | "sqlite"> {
  if (database.kind === "sqlite") return { databaseKind: "sqlite", sqlite: { file: database.file, setting: database.setting ?? "DATABASE_URL" } };
  const written = new URL(database.url).pathname.slice(1);
  let databaseName: string;
  try {
    databaseName = decodeURIComponent(written);
  } catch {
    // A stray "%" is refused with the configuration; never here, but a hint never fails.
    databaseName = written;
  }
  return { databaseKind: "mysql", ...(databaseName ? { databaseName } : {}) };
}

/**
 * What the service's MySQL user must be granted on its database: the
 * migrations create tables (CREATE) and add columns and indexes (ALTER
 * TABLE, which MySQL checks against ALTER, CREATE and INSERT), and the
 * service reads and writes rows, locking them with SELECT … FOR UPDATE
 * (UPDATE). The README says the same.
 */
const mysqlGrants = "ALL on it, or at least SELECT, INSERT, UPDATE, DELETE, CREATE and ALTER";

/** Whether `folder` is the SQLite file's folder or one above it: a folder made for that file. */
function holdsSqliteFile(folder: string, file: string): boolean {
  const made = resolve(folder);
  const wanted = resolve(dirname(file));
  return wanted === made || wanted.startsWith(made.endsWith(sep) ? made : made + sep);
}

function codeOf(error: unknown): unknown {
  return typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
}

/**
 * An error's message followed by those of its causes that it does not
 * already repeat: "blob store: create container failed" says what step
 * failed, its cause says why (an unknown host, a refused key).
 */
export function messageWithCauses(error: unknown): string {
  // Knex's own text speaks of a full pool and a missing .transacting(),
  // which at start, with an empty pool, are never the cause.
  if (error instanceof Error && error.name === "KnexTimeoutError") return "no connection to the database within DATABASE_ACQUIRE_TIMEOUT_MS";
  let text = error instanceof Error ? error.message : String(error);
  let cause = error instanceof Error ? error.cause : undefined;
  for (let depth = 0; cause !== undefined && depth < 5; depth++) {
    const next = cause instanceof Error ? cause.message : String(cause);
    if (next !== "" && !text.includes(next)) text += `: ${next}`;
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return text;
}

/**
 * A database name as MySQL reads it in a statement: in backticks, a
 * backtick inside doubled. The name comes from DATABASE_URL, decoded, and
 * may hold any character.
 */
function mysqlIdentifier(name: string | undefined): string {
  return name === undefined ? "`<name>`" : `\`${name.replaceAll("`", "``")}\``;
}

/**
 * `text` as one word of a POSIX shell command, quoted so that nothing in it
 * (a quote, a backtick, `$`) means anything to the shell: in single quotes,
 * a single quote inside closed, given escaped and reopened.
 */
function shellQuoted(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * What to do about an error that stopped the start, appended to its
 * message: the first thing a newcomer sees is then the fix (another port,
 * a database to create), not a bare system error.
 */
export function startupHint(error: unknown, settings: StartupSettings): string {
  // Knex names every failure to take its lock MigrationLocked, a database
  // that refuses the write too: the advice is for a lock that is held.
  if (isReadOnlyRefusal(error) || (error instanceof Error && /read-only option|read-only mode/i.test(error.message))) {
    return " (the database refuses writes: it is read-only, as a primary demoted by a failover is; point DATABASE_URL at the writable primary, or start again once the failover is done)";
  }
  // Knex reports this one as its migration lock refused too.
  if (isSqliteReadOnly(error)) {
    const file = settings.sqlite?.file ?? "the SQLite file";
    const setting = settings.sqlite?.setting === "DATABASE_URL" ? "set DATABASE_URL's sqlite: path to a file" : "set DATA_DIR to a folder";
    return ` (this user may not write ${file}: let it write the file and its folder, or ${setting} it may write)`;
  }
  if (error instanceof Error && error.name === "MigrationLocked" && error.message.includes("already locked")) return ` (${migrationLockAdvice})`;
  if (error instanceof Error && /^Azurite exited .*EADDRINUSE/s.test(error.message)) return " (another process listens on AZURITE_PORT: set it to a free port, or leave it unset for any free one)";
  if (error instanceof BlobStoreUnavailableError) return " (check AZURE_STORAGE_CONNECTION_STRING and that the storage account is reachable)";
  const code = codeOf(error);
  if (code === "EADDRINUSE") return ` (another process listens on ${settings.host}:${settings.port}: stop it, or set PORT to a free port)`;
  const { syscall, path } = error as { syscall?: unknown; path?: unknown };
  if (code === "EACCES" && syscall === "listen") return ` (port ${settings.port} needs privileges this process lacks: set PORT to 1024 or above)`;
  if ((code === "EACCES" || code === "EPERM" || code === "EROFS") && typeof path === "string") {
    // A folder that cannot be made is refused by the one it would go in.
    const folder = syscall === "mkdir" ? dirname(path) : path;
    const why = code === "EROFS" ? `${folder} is on a read-only file system` : `this user may not write ${folder}`;
    return ` (${why}: set DATA_DIR, or DATABASE_URL's sqlite: path, to a folder it may write)`;
  }
  if ((code === "EEXIST" || code === "ENOTDIR") && typeof path === "string") {
    const fromUrl = settings.sqlite?.setting === "DATABASE_URL" && holdsSqliteFile(path, settings.sqlite.file);
    return ` (${path} is a file where a folder is needed: ${fromUrl ? "set DATABASE_URL's sqlite: path to a file in a folder" : "set DATA_DIR to a folder"})`;
  }
  const { target } = error as { target?: unknown };
  if (code === "ENOENT" && syscall === "mkdir" && typeof path === "string" && typeof target === "string") {
    return ` (${path} is a link to ${target}, which does not exist: create that folder (mount its disk), or set DATA_DIR to another)`;
  }
  if (code === "EADDRNOTAVAIL") return ` (${settings.host} is not an address of this machine: set HOST to one, or 0.0.0.0 for all)`;
  if (code === "ENOTFOUND" && (error as { hostname?: unknown }).hostname === settings.host) {
    return ` (HOST "${settings.host}" is not a name this machine resolves: set HOST to an address of this machine, or 0.0.0.0 for all)`;
  }
  if (code === "ER_BAD_DB_ERROR") {
    return ` (the database in DATABASE_URL does not exist: create it, e.g. mysql -e ${shellQuoted(`CREATE DATABASE ${mysqlIdentifier(settings.databaseName)}`)}; the service creates its tables itself)`;
  }
  // 1698 is MariaDB's answer for a user that may log in only without a password, or only by socket.
  // 1044: no rights on the database at all; 1142, 1143: not this statement's (a CREATE, an ALTER) on a table, a column.
  if (code === "ER_DBACCESS_DENIED_ERROR" || code === "ER_TABLEACCESS_DENIED_ERROR" || code === "ER_COLUMNACCESS_DENIED_ERROR") {
    const name = mysqlIdentifier(settings.databaseName);
    return ` (the user in DATABASE_URL lacks rights on the database ${name}: grant it ${mysqlGrants}, e.g. GRANT ALL ON ${name}.* TO 'user'@'host')`;
  }
  if (code === "ER_ACCESS_DENIED_ERROR" || code === "ER_ACCESS_DENIED_NO_PASSWORD_ERROR") return " (check the user and password in DATABASE_URL, and that the user may connect from this host)";
  if (settings.databaseKind === "sqlite" && typeof code === "string" && code.startsWith("SQLITE_CANTOPEN")) {
    return " (check DATABASE_URL's sqlite: path: its folder must exist and this user must be able to write it)";
  }
  if (classifyDbError(error) === "unavailable") {
    return settings.databaseKind === "mysql" ? " (check DATABASE_URL and that MySQL is running and reachable from here)" : " (check DATABASE_URL's sqlite: path)";
  }
  return "";
}

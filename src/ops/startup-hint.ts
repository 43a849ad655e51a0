import { BlobStoreUnavailableError } from "../blob/blob-store.js";
import { classifyDbError } from "../store/db-errors.js";

/** Where the service was told to listen and what database it was given, as the hints name them. */
export interface StartupSettings {
  readonly host: string;
  readonly port: number;
  readonly databaseName?: string;
}

function codeOf(error: unknown): unknown {
  return typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
}

/**
 * What to do about an error that stopped the start, appended to its
 * message: the first thing a newcomer sees is then the fix (another port,
 * a database to create), not a bare system error.
 */
export function startupHint(error: unknown, settings: StartupSettings): string {
  if (error instanceof BlobStoreUnavailableError) return " (check AZURE_STORAGE_CONNECTION_STRING and that the storage account is reachable)";
  const code = codeOf(error);
  if (code === "EADDRINUSE") return ` (another process listens on ${settings.host}:${settings.port}: stop it, or set PORT to a free port)`;
  if (code === "EACCES") return ` (port ${settings.port} needs privileges this process lacks: set PORT to 1024 or above)`;
  if (code === "EADDRNOTAVAIL") return ` (${settings.host} is not an address of this machine: set HOST to one, or 0.0.0.0 for all)`;
  if (code === "ER_BAD_DB_ERROR") {
    const name = settings.databaseName ?? "<name>";
    return ` (the database in DATABASE_URL does not exist: create it, e.g. mysql -e 'CREATE DATABASE \`${name}\`'; the service creates its tables itself)`;
  }
  if (code === "ER_ACCESS_DENIED_ERROR") return " (check the user and password in DATABASE_URL, and that the user may connect from this host)";
  if (classifyDbError(error) === "unavailable") return " (check DATABASE_URL and that MySQL is running and reachable)";
  return "";
}

import fs from "node:fs";

/**
 * The most files the process may have open (its soft RLIMIT_NOFILE, which
 * Node raises to the hard limit as it starts), from /proc/self/limits;
 * Infinity when unlimited, undefined where that cannot be read (not Linux).
 */
export function openFileLimit(limits: () => string = () => fs.readFileSync("/proc/self/limits", "utf8")): number | undefined {
  let text: string;
  try {
    text = limits();
  } catch {
    return undefined;
  }
  const soft = /^Max open files\s+(\S+)/m.exec(text)?.[1];
  if (soft === undefined) return undefined;
  return soft === "unlimited" ? Number.POSITIVE_INFINITY : Number(soft);
}

/** Files the service opens besides its clients' connections: its database pool, the blob client's sockets, logs, the embedded Azurite's files. */
const ownFiles = 256;

/**
 * What is wrong with the process's open-file limit for these settings, or
 * undefined when it is enough (or unknown). Past the limit every new
 * connection, database connection and file read fails: a client opening
 * HTTP_MAX_CONNECTIONS connections would take the service down, not just
 * be refused.
 */
export function openFileLimitProblem(limit: number | undefined, maxConnections: number, poolMax: number): string | undefined {
  const needed = maxConnections + poolMax + ownFiles;
  if (limit === undefined || limit >= needed) return undefined;
  return (
    `the process may open ${limit} files, but HTTP_MAX_CONNECTIONS (${maxConnections}), the database pool (${poolMax}) and the service's own files need ${needed}: ` +
    `raise the limit (ulimit -n, systemd's LimitNOFILE, docker run --ulimit nofile=…) or lower HTTP_MAX_CONNECTIONS to at most ${Math.max(1, limit - poolMax - ownFiles)}`
  );
}

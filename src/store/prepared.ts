import { untilAborted } from "./abandon.js";
import type { Database } from "./database.js";

/** Runs fixed SQL with positional parameters and returns the rows; stops waiting when `signal` aborts. */
export type RunPrepared = <T>(sql: string, params: readonly unknown[], signal?: AbortSignal) => Promise<T[]>;

interface MysqlConnection {
  execute(sql: string, params: readonly unknown[], cb: (err: unknown, rows: unknown) => void): void;
}

interface Pooled {
  acquireConnection(): Promise<MysqlConnection>;
  releaseConnection(conn: MysqlConnection): Promise<void>;
}

/**
 * The hot reads' path: SQL written once, run as a prepared statement on
 * MySQL (mysql2 `execute` on a connection of Knex's own pool, so the pool
 * size, timeouts and session settings stay one), which skips Knex's query
 * building, the client-side escaping and the server's parsing on every
 * call; on SQLite, or with DATABASE_PREPARED_STATEMENTS=off, Knex's raw
 * query. The SQL must be portable: `?` placeholders, no dialect functions.
 */
export function preparedRunner(db: Database): RunPrepared {
  if (!db.preparedStatements) {
    // Knex's raw query: SQLite's rows, or mysql2's [rows, fields].
    return <T>(sql: string, params: readonly unknown[], signal?: AbortSignal) => {
      if (signal?.aborted === true) return Promise.reject(signal.reason);
      const rows = db.knex.raw(sql, params as never).then((result: unknown) => (Array.isArray(result) && Array.isArray(result[0]) ? result[0] : result) as T[]);
      return untilAborted(rows, signal);
    };
  }
  const client = db.knex.client as Pooled;
  const run = async <T>(sql: string, params: readonly unknown[], signal: AbortSignal | undefined) => {
    const conn = await client.acquireConnection();
    // Acquired after the caller gave up (a deadline, a client gone): given
    // back unused, so that a queue of abandoned calls costs the database nothing.
    if (signal?.aborted === true) {
      await client.releaseConnection(conn);
      throw signal.reason;
    }
    try {
      return await new Promise<T[]>((resolve, reject) => conn.execute(sql, params, (err, rows) => (err ? reject(err) : resolve(rows as T[]))));
    } finally {
      // Also when the caller stopped waiting: the connection goes back to
      // the pool once its statement ends (max_statement_time bounds it).
      await client.releaseConnection(conn);
    }
  };
  return <T>(sql: string, params: readonly unknown[], signal?: AbortSignal) => untilAborted(run<T>(sql, params, signal), signal);
}

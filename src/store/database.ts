import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import knexFactory, { type Knex } from "knex";
import type { DatabaseConfig, DatabaseTls } from "../config.js";
import { makeDirectory } from "../ops/make-directory.js";
import { isReadOnlyRefusal } from "./db-errors.js";

type Conn = { query: (sql: string, cb: (err: unknown) => void) => void };
const query = (conn: Conn, sql: string) => new Promise<void>((resolve, reject) => conn.query(sql, (err) => (err ? reject(err) : resolve())));

/** Which SQL dialect a Knex instance speaks; the few dialect differences key off it. */
export type Dialect = "mysql" | "sqlite";

/** Where Knex's own warnings go. */
export interface DatabaseLogger {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** A Knex instance and its dialect. */
export interface Database {
  readonly knex: Knex;
  readonly dialect: Dialect;
  /** Most concurrent single-entity reads sent as one statement (1 on SQLite, which has no round trip to save). */
  readonly readBatchMax: number;
  /** Most concurrent confirms recorded in one transaction (1 on SQLite, whose one connection serialises transactions anyway). */
  readonly confirmGroupMax: number;
  /** Whether the hot reads run as server-side prepared statements (MySQL only). */
  readonly preparedStatements: boolean;
}

/** mysql2's TLS options for the configured ssl-mode (MySQL's own clients' meanings); `verifyIdentity` is mysql2's, which Knex's types do not list. */
function mysqlTls(tls: DatabaseTls): NonNullable<Knex.MySql2ConnectionConfig["ssl"]> {
  if (tls.mode === "REQUIRED") return { rejectUnauthorized: false };
  const ca = tls.caFile === undefined ? {} : { ca: fs.readFileSync(tls.caFile, "utf8") };
  const options = { ...ca, rejectUnauthorized: true, verifyIdentity: tls.mode === "VERIFY_IDENTITY" };
  return options as NonNullable<Knex.MySql2ConnectionConfig["ssl"]>;
}

/**
 * Opens each MySQL connection's socket, and closes it once nothing has come
 * or gone on it for `silentMs`. A server that stops answering without
 * closing (a failover whose old primary went silent, a network partition)
 * would otherwise keep each connection waiting on it, and its place in the
 * pool, until the kernel gives up, some fifteen minutes later: every
 * replica unready all that while, and a SIGTERM never done. The service's
 * statements are not silent that long: the server ends each within its
 * statement timeout and lock wait (on MySQL, whose max_execution_time
 * bounds SELECTs only, its writes are single rows and bounded batches; a
 * COMMIT a stalled replica holds past the bound is cut, and answered
 * COMMIT_OUTCOME_UNKNOWN). Closed, the statement fails as a lost connection
 * (DATABASE_UNAVAILABLE, or COMMIT_OUTCOME_UNKNOWN for a COMMIT) and the
 * pool opens a new connection for the next one.
 */
function closedWhenSilent(host: string, port: number, silentMs: number): () => net.Socket {
  return () => {
    const socket = net.connect(port, host);
    // As mysql2 sets up the sockets it opens itself: no Nagle delay on a
    // statement's last segment, and TCP keep-alive.
    socket.setNoDelay(true);
    socket.setKeepAlive(true);
    socket.setTimeout(silentMs, () =>
      socket.destroy(Object.assign(new Error(`MySQL at ${host}:${port} sent nothing for ${silentMs} ms: the connection was dropped`), { code: "ETIMEDOUT" })),
    );
    return socket;
  };
}

function mysqlConnection(url: string, tls: DatabaseTls | undefined, silentMs: number | undefined): Knex.MySql2ConnectionConfig {
  const u = new URL(url);
  const host = u.hostname;
  const port = u.port === "" ? 3306 : Number(u.port);
  return {
    ...(silentMs === undefined ? {} : { stream: closedWhenSilent(host, port, silentMs) }),
    ...(tls === undefined ? {} : { ssl: mysqlTls(tls) }),
    host,
    port,
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.slice(1)),
    // Times are UTC on the wire and in DATETIME columns, whatever the
    // server's or the host's zone.
    timezone: "Z",
    charset: "utf8mb4",
    supportBigNumbers: true,
    connectTimeout: 5_000,
    // Prepared statements each connection keeps (least recently used are
    // closed). The server caps them across all sessions
    // (max_prepared_stmt_count, 16,382 by default), and every replica's
    // every pooled connection counts; mysql2's own default of 16,000 per
    // connection would let a few replicas reach that cap. The batched reads
    // use about 80 for callers with up to two orgs (README, Performance);
    // past 128 the least used are prepared again when next needed.
    maxPreparedStatements: 128,
  };
}

/**
 * Replaces a pool's connections once one meets a read-only server. After a
 * failover or switchover the old primary may stay up, read-only (Aurora's
 * demoted writer, a switched-over MariaDB), and every pooled connection
 * still reaches it, though DATABASE_URL's name now points at the new
 * primary: each write would fail until the connection is closed, which
 * under steady load is never. So a read-only refusal marks every
 * connection opened until then stale, and the pool (its `validate`, run as
 * a connection is handed out) opens new ones, which resolve the name again.
 */
function replacedOnReadOnly(): { created(conn: object): void; validate(conn: object): boolean; observe(error: unknown): void } {
  const openedAt = new WeakMap<object, number>();
  let staleUpTo = -1;
  let opened = 0;
  return {
    created: (conn) => void openedAt.set(conn, opened++),
    validate: (conn) => (openedAt.get(conn) ?? -1) > staleUpTo,
    observe: (error) => {
      if (isReadOnlyRefusal(error)) staleUpTo = opened - 1;
    },
  };
}

/**
 * Opens the database of the configuration. MySQL gets a pool; SQLite one
 * connection, which is what serialises its transactions (Knex's SQLite
 * client ignores FOR UPDATE), so SQLite is for one process only.
 */
export function openDatabase(
  config: DatabaseConfig,
  logger?: DatabaseLogger,
  /**
   * migrations: connections for schema migrations, which may keep a server
   * busy, and silent, for minutes on a large table: no bound on a
   * statement's time, and none on a connection's silence.
   */
  options: { readonly migrations?: boolean } = {},
): Database {
  // Knex reports pool trouble with console.log; send it to the service's log.
  const log =
    logger === undefined
      ? undefined
      : {
          // Its first line says what failed ("Acquire connection error: connect
          // ECONNREFUSED …"); the driver's stack under it helps no operator.
          warn: (message: unknown) => {
            const first = String(message).split("\n")[0]!;
            // Said every 100 ms of a wait for the migration lock, with advice
            // (`knex migrate:unlock`) that does not apply here: migrateLatest
            // says it once, with what to run instead.
            if (first.startsWith("Can't take lock to run migrations") || first.startsWith("If you are sure migrations are not running")) return;
            logger.warn({ knex: first }, "database");
          },
          error: (message: unknown) => logger.error({ knex: String(message) }, "database"),
          deprecate: () => undefined,
          debug: () => undefined,
        };
  if (config.kind === "mysql") {
    const demoted = replacedOnReadOnly();
    // Beyond any statement's own bound: its timeout and a lock wait, and a margin.
    const silentMs = options.migrations === true ? undefined : config.statementTimeoutMs + config.lockWaitTimeoutSeconds * 1000 + 5_000;
    const statementTimeoutMs = options.migrations === true ? 0 : config.statementTimeoutMs;
    const knex = knexFactory({
      ...(log === undefined ? {} : { log }),
      client: "mysql2",
      connection: mysqlConnection(config.url, config.tls, silentMs),
      pool: {
        min: 0,
        // Migrations hold one connection for the database's migration lock, and run on another.
        max: options.migrations === true ? Math.max(2, config.poolMax) : config.poolMax,
        // An idle connection is closed before its silence would drop it.
        ...(silentMs === undefined ? {} : { idleTimeoutMillis: Math.min(30_000, Math.floor(silentMs / 2)) }),
        // Every session: UTC, bounded lock waits, and bounded statements
        // (MariaDB's max_statement_time; MySQL's max_execution_time, which
        // bounds SELECTs only), so no request waits on the database forever.
        validate: demoted.validate,
        afterCreate(conn: Conn, done: (err: unknown, conn: unknown) => void) {
          demoted.created(conn);
          (async () => {
            await query(conn, "SET time_zone = '+00:00'");
            await query(conn, `SET SESSION innodb_lock_wait_timeout = ${config.lockWaitTimeoutSeconds}`);
            await query(conn, `SET SESSION max_statement_time = ${statementTimeoutMs / 1000}`).catch(() =>
              query(conn, `SET SESSION max_execution_time = ${statementTimeoutMs}`),
            );
          })().then(
            () => done(null, conn),
            (err: unknown) => done(err, conn),
          );
        },
      },
      acquireConnectionTimeout: config.acquireTimeoutMs,
    });
    knex.on("query-error", demoted.observe);
    return { knex, dialect: "mysql", readBatchMax: config.readBatchMax, confirmGroupMax: config.confirmGroupMax, preparedStatements: config.preparedStatements };
  }
  makeDirectory(path.dirname(path.resolve(config.file)));
  const knex = knexFactory({
    ...(log === undefined ? {} : { log }),
    client: "better-sqlite3",
    connection: { filename: config.file },
    useNullAsDefault: true,
    pool: {
      min: 1,
      max: 1,
      afterCreate(conn: { pragma: (sql: string) => unknown }, done: (err: unknown, conn: unknown) => void) {
        conn.pragma("journal_mode = WAL");
        conn.pragma("busy_timeout = 5000");
        done(null, conn);
      },
    },
  });
  return { knex, dialect: "sqlite", readBatchMax: 1, confirmGroupMax: 1, preparedStatements: false };
}

/**
 * Readiness's check of the database: it answers within the probe's time.
 * A read-only MySQL (a demoted primary, a switchover under way) still
 * serves every read, so the replica stays ready, and its check says
 * READ_ONLY: writes are answered DATABASE_UNAVAILABLE until DATABASE_URL
 * leads to a writable server. Taking every replica out of rotation would
 * make a write outage a total one.
 */
export async function checkDatabase(db: Database): Promise<string | undefined> {
  if (db.dialect === "sqlite") {
    await db.knex.raw("select 1");
    return undefined;
  }
  const [rows] = (await db.knex.raw("select @@global.read_only + @@global.innodb_read_only as read_only")) as [Array<{ read_only: number | string }>];
  return Number(rows[0]?.read_only ?? 0) > 0 ? "READ_ONLY" : undefined;
}

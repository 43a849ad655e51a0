// The real things the tests talk to: one Azurite per test process (in
// memory), MariaDB/MySQL from TEST_MYSQL_URL (default the local root
// account), and a fresh database per suite.
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import knexFactory, { type Knex } from "knex";
import { type EmbeddedAzurite, startEmbeddedAzurite } from "../../src/blob/embedded-azurite.js";
import { skippingOnPurpose } from "../runner/channel.js";

/** Which database a suite runs on. */
export type Backend = "mysql" | "sqlite";

const mysqlUrl = process.env["TEST_MYSQL_URL"] ?? "mysql://root:@127.0.0.1:3306/test";
/** Whether this run is CI's (CI set): there a suite that cannot run is a failure, not a skip. */
export const inCi = process.env["CI"] !== undefined && process.env["CI"] !== "" && process.env["CI"] !== "false";

let azurite: Promise<EmbeddedAzurite> | undefined;

/** The shared Azurite, started on first use and stopped when the process exits. */
export function sharedAzurite(): Promise<EmbeddedAzurite> {
  azurite ??= startEmbeddedAzurite({});
  return azurite;
}

/** Stops the shared Azurite, if one was started. */
export async function stopSharedAzurite(): Promise<void> {
  if (azurite !== undefined) await (await azurite).stop();
}

let mysqlCheck: Promise<boolean> | undefined;

/**
 * Whether the MySQL suites can run. Outside CI an unreachable MySQL skips
 * them with a loud line; in CI (CI set) it is an error, because a skipped
 * suite proves nothing.
 */
export async function mysqlAvailable(): Promise<boolean> {
  mysqlCheck ??= (async () => {
    // Knex's own stack of a failed connection says nothing the line below does not.
    const quiet = { warn: () => undefined, error: () => undefined, debug: () => undefined, deprecate: () => undefined };
    const knex = knexFactory({ client: "mysql2", connection: mysqlUrl, pool: { min: 0, max: 1 }, log: quiet });
    try {
      await knex.raw("select 1");
      return true;
    } catch (error) {
      // A server without the URL's database (MySQL 8 ships no `test`): the
      // suites make their own databases through it, so it is made here.
      if ((error as { code?: string }).code === "ER_BAD_DB_ERROR") {
        const url = new URL(mysqlUrl);
        const name = decodeURIComponent(url.pathname.slice(1));
        url.pathname = "/";
        const server = knexFactory({ client: "mysql2", connection: url.toString(), pool: { min: 0, max: 1 } });
        try {
          await server.raw("CREATE DATABASE IF NOT EXISTS ??", [name]);
          return true;
        } catch {
          // Said below, with the first error.
        } finally {
          await server.destroy();
        }
      }
      if (inCi) throw new Error(`CI is set and MySQL at ${mysqlUrl} is unreachable: the MySQL suite is required in CI`, { cause: error });
      const line = "!".repeat(78);
      console.error(`\n${line}\n!! MySQL at ${mysqlUrl} is unreachable: SKIPPING THE MYSQL SUITES.\n!! ${(error as Error).message}\n!! Set TEST_MYSQL_URL or start MariaDB; CI requires them.\n${line}\n`);
      return false;
    } finally {
      await knex.destroy();
    }
  })();
  const available = await mysqlCheck;
  // Said for every file that asks: a file left with no test is otherwise a failure.
  if (!available) skippingOnPurpose(`MySQL at ${mysqlUrl} is unreachable`);
  return available;
}

/** A database for one suite, and how to drop it. */
export interface TestDatabase {
  /** DATABASE_URL of the fresh database. */
  readonly url: string;
  drop(): Promise<void>;
}

/** A connection of the test's own to a service's database: to reach behind the API (triggers, old timestamps). Destroy it when done. */
export function connectTestDatabase(backend: Backend, db: TestDatabase): Knex {
  return knexFactory(
    backend === "mysql"
      ? { client: "mysql2", connection: db.url }
      : { client: "better-sqlite3", connection: { filename: db.url.slice("sqlite:".length) }, useNullAsDefault: true },
  );
}

/** Creates an empty database on the backend. */
export async function createTestDatabase(backend: Backend): Promise<TestDatabase> {
  const name = `ev_test_${process.pid}_${randomBytes(4).toString("hex")}`;
  if (backend === "sqlite") {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-test-"));
    return {
      url: `sqlite:${path.join(dir, `${name}.db`)}`,
      drop: async () => fs.rmSync(dir, { recursive: true, force: true }),
    };
  }
  const admin = knexFactory({ client: "mysql2", connection: mysqlUrl, pool: { min: 0, max: 1 } });
  await admin.raw(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4`);
  await admin.destroy();
  const url = new URL(mysqlUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const k = knexFactory({ client: "mysql2", connection: mysqlUrl, pool: { min: 0, max: 1 } });
      await k.raw(`DROP DATABASE IF EXISTS \`${name}\``).finally(() => k.destroy());
    },
  };
}

import type { Knex } from "knex";
import * as init from "./migrations/0001-init.js";
import * as access from "./migrations/0002-access.js";
import * as packageMd5 from "./migrations/0003-package-md5.js";
import * as flatReads from "./migrations/0004-flat-reads.js";
import * as events from "./migrations/0005-events.js";
import * as eventRetention from "./migrations/0006-event-retention.js";
import * as versionBlobFolder from "./migrations/0007-version-blob-folder.js";
import * as versionDataCost from "./migrations/0008-version-data-cost.js";
import * as uploadActivated from "./migrations/0009-upload-activated.js";
import * as openUploads from "./migrations/0010-open-uploads.js";
import * as identity from "./migrations/0011-database-identity.js";
import * as abandonedUploads from "./migrations/0012-abandoned-uploads.js";
import * as uploadIssuer from "./migrations/0013-upload-issuer.js";
import { isSqliteReadOnly } from "./db-errors.js";
import { hasIndex } from "./migrations/has-index.js";

// Imported statically so the same names land in knex_migrations whether the
// code runs from TypeScript or from a build; never rename an entry.
const migrations: Record<string, Knex.Migration> = {
  "0001-init": init,
  "0002-access": access,
  "0003-package-md5": packageMd5,
  "0004-flat-reads": flatReads,
  "0005-events": events,
  "0006-event-retention": eventRetention,
  "0007-version-blob-folder": versionBlobFolder,
  "0008-version-data-cost": versionDataCost,
  "0009-upload-activated": uploadActivated,
  "0010-open-uploads": openUploads,
  "0011-database-identity": identity,
  "0012-abandoned-uploads": abandonedUploads,
  "0013-upload-issuer": uploadIssuer,
};

/**
 * Migrations that builds before a release recorded under a name no longer
 * in the list above, and how to take back their work, so that the one in
 * their place runs instead: Knex refuses a database that records a
 * migration it does not know ("the migration directory is corrupt").
 */
const withdrawn: ReadonlyArray<{ readonly name: string; undo(knex: Knex): Promise<void> }> = [
  {
    // Page budgets in bytes, before 0008-version-data-cost measured what a
    // version costs to serve.
    name: "0008-version-data-bytes",
    async undo(knex) {
      if (await hasIndex(knex, "versions", "versions_entity_id_seq_data_bytes_index")) {
        await knex.schema.alterTable("versions", (t) => t.dropIndex(["entity_id", "seq", "data_bytes"], "versions_entity_id_seq_data_bytes_index"));
      }
      if (await knex.schema.hasColumn("versions", "data_bytes")) await knex.schema.alterTable("versions", (t) => t.dropColumn("data_bytes"));
    },
  },
];

/** Takes back the work of withdrawn migrations a database records, and their records. */
async function takeBackWithdrawn(knex: Knex): Promise<void> {
  if (!(await knex.schema.hasTable("knex_migrations"))) return;
  for (const migration of withdrawn) {
    if ((await knex("knex_migrations").where("name", migration.name).first()) === undefined) continue;
    await migration.undo(knex);
    await knex("knex_migrations").where("name", migration.name).del();
  }
}

const source: Knex.MigrationSource<string> = {
  getMigrations: async () => Object.keys(migrations),
  getMigrationName: (name) => name,
  getMigration: async (name) => migrations[name]!,
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Whether a failed migration step is another process's migration in the
 * way, waited out. Knex names every failure to take its lock
 * MigrationLocked, a file this process may not write too: that one waits
 * for nothing, and fails at once.
 */
export function isLockContention(error: unknown): boolean {
  if (isSqliteReadOnly(error)) return false;
  const e = error as { name?: string; code?: string; errno?: number; message?: string };
  return (
    e.name === "MigrationLocked" ||
    e.code === "ER_TABLE_EXISTS_ERROR" ||
    e.code === "ER_DUP_ENTRY" ||
    e.code === "ER_LOCK_DEADLOCK" ||
    /already exists|UNIQUE constraint failed|Migration table is already locked/i.test(e.message ?? "")
  );
}

const lockTable = "knex_migrations_lock";

/**
 * Makes Knex's migration lock table hold exactly one row before Knex looks
 * at it. Knex inserts that row itself when it finds the table empty, and two
 * processes that both find it empty both insert one (its key is
 * auto-increment); after that Knex's lock (an UPDATE that must change
 * exactly one row) can never be taken, and every start waits out its
 * deadline and fails. Here the row is inserted with a fixed key, so of two
 * racing processes one inserts and the other's insert is ignored; and a
 * table already left with several unlocked rows (nobody can hold the lock
 * then) is cut back to its first.
 */
async function ensureOneLockRow(knex: Knex): Promise<void> {
  if (!(await knex.schema.hasTable(lockTable))) {
    // Knex's own definition of the table.
    await knex.schema.createTable(lockTable, (t) => {
      t.increments("index").primary();
      t.integer("is_locked");
    });
  }
  const rows = await knex<{ index: number; is_locked: number | null }>(lockTable).select("index", "is_locked").orderBy("index");
  if (rows.length === 0) {
    await knex(lockTable).insert({ index: 1, is_locked: 0 }).onConflict("index").ignore();
  } else if (rows.length > 1 && rows.every((r) => Number(r.is_locked) === 0)) {
    await knex(lockTable).where("index", ">", rows[0]!.index).del();
  }
}

/** What to do about a migration lock that outlived the wait: the start-up hint and the wait's log line say it. */
export const migrationLockAdvice =
  "when no other process is starting on this database, a process stopped mid-migration left it: clear it with `npm run migrate:unlock` (with the service's DATABASE_URL, or DATA_DIR) and start again";

/**
 * MySQL's named lock for this database's migrations (GET_LOCK: at most 64
 * characters, so the database's name is hashed). It belongs to a session,
 * so the server frees it when its process dies, however it dies.
 */
const sessionLockName = "CONCAT('entity-versions-migrate-', LEFT(SHA1(DATABASE()), 32))";

/** The database's migration lock, as its holder sees it. */
interface SessionLock {
  /** Throws when the lock is no longer this process's: its connection was closed (a proxy's reset, a KILL), and another process may migrate now. */
  assertHeld(): Promise<void>;
}

/** How often the lock's connection is used while the migrations run: a connection left idle is what proxies and wait_timeout close. */
const lockHeartbeatMs = 10_000;

/**
 * Runs `run` holding the database's migration lock on MySQL. Every process
 * takes it before it looks at the schema, so one migrates at a time and the
 * others wait for as long as it runs, however long a migration takes (a
 * measuring pass over a large history), saying so once. Held on a
 * connection of its own (a transaction pins it), kept from going idle
 * (wait_timeout raised, a heartbeat that also checks the lock is still
 * its own), freed when `run` ends, or by the server when the process is
 * gone. `stop` is taken between waits.
 */
async function holdingSessionLock<T>(knex: Knex, waiting: ((message: string) => void) | undefined, stop: AbortSignal | undefined, run: (lock: SessionLock) => Promise<T>): Promise<T> {
  // How the run ended: the transaction's own ROLLBACK or COMMIT, on a
  // connection the server closed, fails too, and must neither hide why the
  // run stopped nor fail a run that did all it had to.
  let failure: { error: unknown } | undefined;
  let done: { value: T } | undefined;
  try {
    return await knex.transaction(async (session) => {
      // A year, MySQL's and MariaDB's most: the server never closes it for being idle.
      await session.raw("SET SESSION wait_timeout = 31536000");
      for (let said = false; ; ) {
        stop?.throwIfAborted();
        const [rows] = (await session.raw(`SELECT GET_LOCK(${sessionLockName}, 1) AS got`)) as unknown as [Array<{ got: number | string | null }>];
        if (Number(rows[0]?.got) === 1) break;
        if (!said) {
          said = true;
          waiting?.("another process is migrating this database; waiting for it to finish");
        }
      }
      const held = async () => {
        const [rows] = (await session.raw(`SELECT IS_USED_LOCK(${sessionLockName}) = CONNECTION_ID() AS mine`)) as unknown as [Array<{ mine: number | string | null }>];
        return Number(rows[0]?.mine) === 1;
      };
      let lost = false;
      const heartbeat = setInterval(() => {
        held().then(
          (mine) => void (lost ||= !mine),
          () => void (lost = true),
        );
      }, lockHeartbeatMs);
      heartbeat.unref();
      const lock: SessionLock = {
        assertHeld: async () => {
          if (lost || !(await held().catch(() => false))) {
            lost = true;
            throw new Error("the database's migration lock was lost (its connection closed), so another process may be migrating: start again");
          }
        },
      };
      try {
        const value = await run(lock);
        done = { value };
        return value;
      } catch (error) {
        failure = { error };
        throw error;
      } finally {
        clearInterval(heartbeat);
        await session.raw(`SELECT RELEASE_LOCK(${sessionLockName})`).catch(() => undefined);
      }
    });
  } catch (error) {
    if (done !== undefined) return done.value;
    throw failure === undefined ? error : failure.error;
  }
}

/**
 * The migrations, on MySQL, by a process that holds the database's
 * migration lock: nobody else migrates, so Knex's own lock row, when it is
 * set, was left by a process killed mid-migration, and is cleared (said
 * once); and an error is a migration's own, thrown at once. Nothing is
 * written when nothing is pending, so a replica can start on a read-only
 * server (a failover under way) and serve reads. The lock is checked
 * before each migration: one lost (its connection closed) stops the start.
 */
async function migrateHoldingLock(knex: Knex, lock: SessionLock, waiting: ((message: string) => void) | undefined, stop: AbortSignal | undefined): Promise<void> {
  await ensureOneLockRow(knex);
  await takeBackWithdrawn(knex);
  if ((await pendingMigrations(knex)) === 0) return;
  await lock.assertHeld();
  const held = await knex<{ is_locked: number | null }>(lockTable).where("is_locked", 1).first();
  if (held !== undefined) {
    waiting?.("a process stopped mid-migration left the migration lock set; no other process is migrating (this one holds the database's lock), so it is cleared and the migrations go on");
    await knex.migrate.forceFreeMigrationsLock({ migrationSource: source });
  }
  for (;;) {
    stop?.throwIfAborted();
    // Done, even if the lock was lost during the last one: nothing is left to run twice.
    if ((await pendingMigrations(knex)) === 0) return;
    await lock.assertHeld();
    await knex.migrate.up({ migrationSource: source });
  }
}

/** How many migrations are still to run. */
async function pendingMigrations(knex: Knex): Promise<number> {
  const [, pending] = (await knex.migrate.list({ migrationSource: source })) as [unknown[], unknown[]];
  return pending.length;
}

/**
 * Brings the schema up to date. Migrations run one at a time, each taking
 * and freeing Knex's lock, and `stop` (a SIGTERM during start-up: a rollout
 * superseded, a node drained) is honoured between them, rejecting with its
 * reason: a stop never leaves the lock held. On MySQL the whole run holds
 * the database's own migration lock (holdingSessionLock), so replicas
 * starting together wait for each other as long as a migration runs, and
 * one killed mid-migration leaves nothing to clear by hand. SQLite serves
 * one process, whose migrations are each one transaction: Knex's lock is
 * waited for up to `waitMs` (two processes creating Knex's own tables at
 * once collide, which is waited out too), and one left by a killed process
 * needs `npm run migrate:unlock` (see the README).
 */
export async function migrateLatest(knex: Knex, waitMs = 60_000, waiting?: (message: string) => void, stop?: AbortSignal): Promise<void> {
  if (knex.client.config.client === "mysql2") return holdingSessionLock(knex, waiting, stop, (lock) => migrateHoldingLock(knex, lock, waiting, stop));
  let deadline = Date.now() + waitMs;
  let said = false;
  for (;;) {
    stop?.throwIfAborted();
    try {
      await ensureOneLockRow(knex);
      // One process on SQLite: nobody else could be migrating.
      await takeBackWithdrawn(knex);
      const [, ran] = (await knex.migrate.up({ migrationSource: source })) as [number, string[]];
      if (ran.length === 0) {
        // Knex picks the next migration before it takes the lock, and drops
        // it under the lock when another process ran it meanwhile: nothing
        // run is not the end unless nothing is pending.
        if ((await pendingMigrations(knex)) === 0) return;
      }
      // Progress: a wait for the lock counts from here.
      deadline = Date.now() + waitMs;
    } catch (error) {
      if (!isLockContention(error) || Date.now() > deadline) throw error;
      if (!said && (error as Error).message?.includes("Migration table is already locked")) {
        said = true;
        waiting?.(`another process holds the migration lock; waiting up to ${waitMs / 1000} s (${migrationLockAdvice})`);
      }
      await sleep(100 + Math.random() * 200);
    }
  }
}

/**
 * Clears the migration lock (Knex's forceFreeMigrationsLock): what
 * `npm run migrate:unlock` does, over the service's own connection
 * settings, TLS included.
 */
export async function freeMigrationLock(knex: Knex): Promise<void> {
  await ensureOneLockRow(knex);
  await knex.migrate.forceFreeMigrationsLock({ migrationSource: source });
}

/** The random id migration 0011 gave this database (see claimContainer). */
export async function databaseIdentity(knex: Knex): Promise<string> {
  const row = await knex<{ id: string }>("database_identity").first("id");
  if (row === undefined) throw new Error("the database has no identity row: its migrations did not run");
  return row.id;
}

/**
 * A few of this database's package paths, none when it has no versions: a
 * container that holds one of them holds this database's packages. Each of
 * five entities' newest (tip) and active versions (whatever removed older
 * blobs left them), and five versions read in no order (the first ones
 * kept, where the embedded Azurite lost the last seconds' blobs). Each is
 * a bounded read (entities joined to versions by primary key, stopping at
 * the limit), never a sort of the versions table: a large one would cost
 * every start on a container that does not record this database.
 */
export async function somePackagePaths(knex: Knex): Promise<string[]> {
  const newest = await knex({ e: "entities" }).join({ v: "versions" }, "v.id", "e.tip_version_id").select<Array<{ storage_path: string }>>("v.storage_path").limit(5);
  const active = await knex({ e: "entities" }).join({ v: "versions" }, "v.id", "e.active_version_id").select<Array<{ storage_path: string }>>("v.storage_path").limit(5);
  const others = await knex<{ storage_path: string }>("versions").select("storage_path").limit(5);
  return [...new Set([...newest, ...active, ...others].map((row) => row.storage_path))];
}

/** Where one version's blobs are recorded: what a start on the embedded Azurite checks the emulator still holds. */
export interface RecordedPackage {
  readonly entityId: string;
  readonly versionId: string;
  readonly version: string;
  readonly storagePath: string;
  readonly lockPath: string | undefined;
}

/**
 * Every version's recorded blob paths, or undefined when there are more
 * than `atMost` versions: a start-up check for development data, read with
 * no order so that a large table costs one bounded read, not a sort.
 */
export async function recordedPackages(knex: Knex, atMost: number): Promise<RecordedPackage[] | undefined> {
  const rows = await knex<{ id: string; entity_id: string; version: string; storage_path: string; package_lock_path: string | null }>("versions")
    .select("id", "entity_id", "version", "storage_path", "package_lock_path")
    .limit(atMost + 1);
  if (rows.length > atMost) return undefined;
  return rows.map((row) => ({ entityId: row.entity_id, versionId: row.id, version: row.version, storagePath: row.storage_path, lockPath: row.package_lock_path ?? undefined }));
}

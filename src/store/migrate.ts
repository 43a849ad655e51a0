import type { Knex } from "knex";
import * as init from "./migrations/0001-init.js";
import * as access from "./migrations/0002-access.js";

// Imported statically so the same names land in knex_migrations whether the
// code runs from TypeScript or from a build; never rename an entry.
const migrations: Record<string, Knex.Migration> = {
  "0001-init": init,
  "0002-access": access,
};

const source: Knex.MigrationSource<string> = {
  getMigrations: async () => Object.keys(migrations),
  getMigrationName: (name) => name,
  getMigration: async (name) => migrations[name]!,
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function isLockContention(error: unknown): boolean {
  const e = error as { name?: string; code?: string; errno?: number; message?: string };
  return (
    e.name === "MigrationLocked" ||
    e.code === "ER_TABLE_EXISTS_ERROR" ||
    e.code === "ER_DUP_ENTRY" ||
    e.code === "ER_LOCK_DEADLOCK" ||
    /already exists|UNIQUE constraint failed|Migration table is already locked/i.test(e.message ?? "")
  );
}

/**
 * Brings the schema up to date. Knex guards migrations with a lock row but
 * fails rather than waits when another process holds it, and two processes
 * creating Knex's own tables at once collide; both are waited out here, so
 * replicas may start together. A lock left by a crashed migration needs
 * `npx knex migrate:unlock` (see the README).
 */
export async function migrateLatest(knex: Knex, waitMs = 60_000): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      await knex.migrate.latest({ migrationSource: source });
      return;
    } catch (error) {
      if (!isLockContention(error) || Date.now() > deadline) throw error;
      await sleep(100 + Math.random() * 200);
    }
  }
}

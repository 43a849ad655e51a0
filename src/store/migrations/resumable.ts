import type { Knex } from "knex";
import { hasIndex } from "./has-index.js";

/*
 * Steps of a migration that a later start can take again. MySQL commits
 * each statement of a schema change as it runs (a table's CREATE, then
 * each of its indexes), so a migration whose process was killed part-way
 * (an OOM, a failed probe, a drained node during a first deploy) leaves
 * some of it done and none of it recorded; the next start runs it again
 * from the top, and each step here does what is still missing. (SQLite
 * runs each migration as one transaction: nothing is left half-done.)
 */

/** Creates a table; when it is there already, adds the indexes of its definition it lacks. */
export async function createTableResuming(knex: Knex, table: string, define: (t: Knex.CreateTableBuilder) => void): Promise<void> {
  if (!(await knex.schema.hasTable(table))) {
    await knex.schema.createTable(table, define);
    return;
  }
  // Knex creates a table's keys other than the primary one as statements
  // of their own, after the CREATE: on MySQL `alter table … add unique
  // \`name\`(…)` or `add index \`name\`(…)`, on SQLite `create [unique]
  // index \`name\` on …`.
  for (const { sql } of knex.schema.createTable(table, define).toSQL()) {
    const index = /^(?:alter table `[^`]+` add (?:unique|index)|create (?:unique )?index) `([^`]+)`/.exec(sql)?.[1];
    if (index !== undefined && !(await hasIndex(knex, table, index))) await knex.raw(sql);
  }
}

/** Adds a column unless it is there. */
export async function addColumnResuming(knex: Knex, table: string, column: string, define: (t: Knex.AlterTableBuilder) => void): Promise<void> {
  if (!(await knex.schema.hasColumn(table, column))) await knex.schema.alterTable(table, define);
}

/** Adds an index by its name unless it is there. */
export async function addIndexResuming(knex: Knex, table: string, name: string, define: (t: Knex.AlterTableBuilder) => void): Promise<void> {
  if (!(await hasIndex(knex, table, name))) await knex.schema.alterTable(table, define);
}

/** Drops an index by its name if it is there. */
export async function dropIndexResuming(knex: Knex, table: string, name: string, define: (t: Knex.AlterTableBuilder) => void): Promise<void> {
  if (await hasIndex(knex, table, name)) await knex.schema.alterTable(table, define);
}

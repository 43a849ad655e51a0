import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import { createTableResuming } from "./resumable.js";

/**
 * A random id of this database, made once. The blob container records the
 * id of the database whose packages it holds (claimContainer), so that a
 * second database pointed at the same container (a development folder
 * switched from SQLite to MySQL, two environments given one container) is
 * refused at start, rather than each one's sweeper deleting the other's
 * packages as blobs no record of its own claims.
 */
export async function up(knex: Knex): Promise<void> {
  await createTableResuming(knex, "database_identity", (t) => {
    t.string("id", 36).primary();
    t.datetime("created_at", { precision: 3 }).notNullable();
  });
  if ((await knex("database_identity").first("id")) === undefined) {
    await knex("database_identity").insert({ id: randomUUID(), created_at: new Date() });
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("database_identity");
}

import type { Knex } from "knex";
import { addColumnResuming, createTableResuming } from "./resumable.js";

function binary(knex: Knex, t: Knex.CreateTableBuilder): void {
  if (knex.client.config.client !== "mysql2") return;
  t.charset("utf8mb4");
  t.collate("utf8mb4_bin");
}

/**
 * Who may use an entity (spec section 5): publishers, shares, organization
 * stores, and the public-store flag on the entity row. Every change to them
 * takes the entity row's lock, like a confirm, so the first push's claim and
 * access changes never interleave.
 */
export async function up(knex: Knex): Promise<void> {
  await addColumnResuming(knex, "entities", "public_store", (t) => {
    t.boolean("public_store").notNullable().defaultTo(false);
  });
  for (const [table, column] of [
    ["entity_publishers", "user_id"],
    ["entity_shares", "user_id"],
    ["entity_org_stores", "org_id"],
  ] as const) {
    await createTableResuming(knex, table, (t) => {
      binary(knex, t);
      t.string("entity_id", 128).notNullable();
      t.string(column, 255).notNullable();
      t.primary(["entity_id", column]);
    });
  }
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ["entity_org_stores", "entity_shares", "entity_publishers"]) await knex.schema.dropTable(table);
  await knex.schema.alterTable("entities", (t) => t.dropColumn("public_store"));
}

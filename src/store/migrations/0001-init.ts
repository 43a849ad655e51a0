import type { Knex } from "knex";
import { createTableResuming } from "./resumable.js";

/** MySQL only: SQLite has no charsets, and compares bytes already. */
function binary(knex: Knex, t: Knex.CreateTableBuilder): void {
  if (knex.client.config.client !== "mysql2") return;
  t.charset("utf8mb4");
  t.collate("utf8mb4_bin");
}

/**
 * The first schema. Ids compare byte for byte (utf8mb4_bin on MySQL, as
 * SQLite does by default) so that "Foo" and "foo" are two entities on both.
 */
export async function up(knex: Knex): Promise<void> {
  await createTableResuming(knex, "entities", (t) => {
    binary(knex, t);
    t.string("id", 128).primary();
    t.string("tip_version_id", 64).nullable();
    t.string("active_version_id", 64).nullable();
    // Per-entity creation counter: orders versions without trusting clocks.
    t.bigInteger("last_seq").notNullable().defaultTo(0);
    t.datetime("created_at", { precision: 3 }).notNullable();
  });
  await createTableResuming(knex, "versions", (t) => {
    binary(knex, t);
    t.string("id", 64).primary();
    t.string("entity_id", 128).notNullable();
    t.bigInteger("seq").notNullable();
    t.string("version", 17).notNullable();
    t.string("source_hash", 128).notNullable();
    t.string("upload_id", 64).notNullable().unique();
    t.string("storage_path", 512).notNullable();
    t.bigInteger("file_size_bytes").notNullable();
    t.string("package_lock_path", 512).nullable();
    t.text("service_dependencies").notNullable();
    t.text("package_json", "mediumtext").nullable();
    t.string("base_version_id", 64).nullable();
    t.string("published_by", 255).notNullable();
    t.datetime("created_at", { precision: 3 }).notNullable();
    t.unique(["entity_id", "seq"]);
    t.unique(["entity_id", "version"]);
    t.index(["entity_id", "source_hash"]);
  });
  // One row per issued upload URL pair. Its state is the claim on the
  // upload's blobs: confirm turns "issued" into "confirmed" and deleting a
  // version or sweeping an abandoned upload turns it into "deleting", each
  // under the row's lock, so a blob is never both kept and deleted.
  await createTableResuming(knex, "uploads", (t) => {
    binary(knex, t);
    t.string("id", 64).primary();
    t.string("entity_id", 128).notNullable();
    t.string("state", 16).notNullable();
    t.datetime("created_at", { precision: 3 }).notNullable();
    t.integer("attempts").notNullable().defaultTo(0);
    t.datetime("next_attempt_at", { precision: 3 }).nullable();
    t.index(["state", "next_attempt_at"]);
    t.index(["entity_id"]);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("uploads");
  await knex.schema.dropTable("versions");
  await knex.schema.dropTable("entities");
}

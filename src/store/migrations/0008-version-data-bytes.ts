import type { Knex } from "knex";

/**
 * Each version records the bytes of its variable data (package_json and
 * service_dependencies as stored), indexed with its place in the entity's
 * history, so that a page of ListVersions can stop at a byte budget reading
 * only the index: without it, a few hundred versions each with a large
 * package_json made one page hundreds of megabytes, which a single request
 * could ask for. Versions recorded before are measured here, once.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.integer("data_bytes").notNullable().defaultTo(0);
  });
  // Bytes, not characters: SQLite's length() of text counts characters.
  const bytes = knex.client.dialect === "sqlite3" ? (column: string) => `length(cast(${column} as blob))` : (column: string) => `length(${column})`;
  await knex.raw(`update versions set data_bytes = ${bytes("service_dependencies")} + coalesce(${bytes("package_json")}, 0)`);
  await knex.schema.alterTable("versions", (t) => {
    t.index(["entity_id", "seq", "data_bytes"], "versions_entity_id_seq_data_bytes_index");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.dropIndex(["entity_id", "seq", "data_bytes"], "versions_entity_id_seq_data_bytes_index");
  });
  await knex.schema.alterTable("versions", (t) => {
    t.dropColumn("data_bytes");
  });
}

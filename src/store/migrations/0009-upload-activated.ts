import type { Knex } from "knex";

/**
 * An upload whose confirm was answered with an existing version of the
 * same source (deduplication) and made that version active records which
 * one: the confirm leaves no version of its own to know it by, and a retry
 * of it (its answer lost) must answer the same and change nothing, not
 * activate that version again over an activation made since.
 */
export async function up(knex: Knex): Promise<void> {
  // MySQL commits a schema change at once: a start stopped after it finds it made.
  if (await knex.schema.hasColumn("uploads", "activated_version_id")) return;
  await knex.schema.alterTable("uploads", (t) => {
    t.string("activated_version_id", 36).nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("uploads", (t) => {
    t.dropColumn("activated_version_id");
  });
}

import type { Knex } from "knex";
import { addColumnResuming } from "./resumable.js";

/**
 * A version's own copy of its package lives under the version's id
 * (`versions/{entity}/{version}/…`), made afresh by the confirm that
 * creates it, so no copy made by an earlier confirm of the same upload (one
 * refused, say, for a stale base) can ever be taken for it. When the version
 * is deleted, its upload's row (the deletion queue) records which version's
 * folder goes with it. Versions confirmed before this keep their copy under
 * the upload's id, which the deleter still deletes.
 */
export async function up(knex: Knex): Promise<void> {
  await addColumnResuming(knex, "uploads", "version_id", (t) => {
    t.string("version_id", 36).nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("uploads", (t) => {
    t.dropColumn("version_id");
  });
}

import type { Knex } from "knex";
import { hasIndex } from "./has-index.js";

const indexName = "uploads_state_created_at_index";

/**
 * Uploads by state and age: each sweep looks for uploads still "issued"
 * past the orphan grace. The (state, next_attempt_at) index narrows that
 * only to every open upload, which any pusher can make by the thousand
 * per entity id: without this one, a sweep read them all, and enough of
 * them would time its first step out and stop every sweep.
 */
export async function up(knex: Knex): Promise<void> {
  // MySQL commits a schema change at once: a start stopped after it finds it made.
  if (await hasIndex(knex, "uploads", indexName)) return;
  await knex.schema.alterTable("uploads", (t) => {
    t.index(["state", "created_at"], indexName);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("uploads", (t) => {
    t.dropIndex(["state", "created_at"], indexName);
  });
}

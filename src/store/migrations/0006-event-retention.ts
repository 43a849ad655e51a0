import type { Knex } from "knex";
import { addIndexResuming } from "./resumable.js";

/**
 * Event retention (EVENT_RETENTION_DAYS): the index on occurred_at lets the
 * sweeper find the oldest events without reading the whole log.
 */
export async function up(knex: Knex): Promise<void> {
  await addIndexResuming(knex, "entity_events", "entity_events_occurred_at_index", (t) => {
    t.index(["occurred_at"], "entity_events_occurred_at_index");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("entity_events", (t) => {
    t.dropIndex(["occurred_at"], "entity_events_occurred_at_index");
  });
}

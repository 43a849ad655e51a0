import type { Knex } from "knex";
import { addColumnResuming, createTableResuming } from "./resumable.js";

/**
 * The event log: one row per change to an entity, written in the change's
 * own transaction. `seq` numbers an entity's events from 1 with no gaps
 * (entities.last_event_seq, moved under the entity row's lock), so the
 * event id is (entity_id, seq), reads of a page or of what came after an
 * event walk the primary key, and a watcher that has seen event n knows
 * that n + 1 is the next one.
 */
export async function up(knex: Knex): Promise<void> {
  await addColumnResuming(knex, "entities", "last_event_seq", (t) => {
    t.bigInteger("last_event_seq").notNullable().defaultTo(0);
  });
  await createTableResuming(knex, "entity_events", (t) => {
    if (knex.client.config.client === "mysql2") {
      t.charset("utf8mb4");
      t.collate("utf8mb4_bin");
    }
    t.string("entity_id", 128).notNullable();
    t.bigInteger("seq").notNullable();
    // The EventType name without its prefix (VERSION_CREATED, …): readable in SQL.
    t.string("type", 32).notNullable();
    t.string("actor", 255).notNullable();
    t.datetime("occurred_at", { precision: 3 }).notNullable();
    t.string("version_id", 64).nullable();
    t.string("version", 17).nullable();
    t.string("previous_active_version_id", 64).nullable();
    // ACCESS_CHANGED: the AccessChangeKind name without its prefix, and the user or organization.
    t.string("access_kind", 32).nullable();
    t.string("access_subject", 255).nullable();
    t.primary(["entity_id", "seq"]);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("entity_events");
  await knex.schema.alterTable("entities", (t) => t.dropColumn("last_event_seq"));
}

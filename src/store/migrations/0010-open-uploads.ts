import type { Knex } from "knex";
import { hasIndex } from "./has-index.js";

const indexName = "uploads_entity_id_state_index";

/**
 * Uploads by entity and state: upload-url counts an entity's open
 * ("issued") uploads against MAX_OPEN_UPLOADS_PER_ENTITY, which the
 * entity_id index alone would answer by reading every upload the entity
 * ever had, one per version.
 */
export async function up(knex: Knex): Promise<void> {
  // MySQL commits a schema change at once: a start stopped after it finds it made.
  if (await hasIndex(knex, "uploads", indexName)) return;
  await knex.schema.alterTable("uploads", (t) => {
    t.index(["entity_id", "state"], indexName);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("uploads", (t) => {
    t.dropIndex(["entity_id", "state"], indexName);
  });
}

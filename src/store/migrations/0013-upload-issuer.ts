import type { Knex } from "knex";
import { hasIndex } from "./has-index.js";

const indexName = "uploads_entity_id_state_issued_to_index";
/** 0010-open-uploads' index, which this one takes the place of. */
const replacedIndexName = "uploads_entity_id_state_index";

/**
 * Who an upload was issued to (the caller's user id, sized like
 * entity_publishers.user_id): upload-url counts open uploads against
 * MAX_OPEN_UPLOADS_PER_ENTITY per entity and caller, since counted per
 * entity alone, anyone allowed to push could fill an unclaimed id's quota
 * before its first push, or its owner's. Uploads issued before this
 * migration have none, and count for nobody. The (entity_id, state,
 * issued_to) index answers that count, and every query 0010's
 * (entity_id, state) index answered, so it replaces it.
 */
export async function up(knex: Knex): Promise<void> {
  // MySQL commits each schema change at once: a start stopped half-way
  // finds the steps it made, and skips them.
  if (!(await knex.schema.hasColumn("uploads", "issued_to"))) {
    await knex.schema.alterTable("uploads", (t) => {
      t.string("issued_to", 255).nullable();
    });
  }
  if (!(await hasIndex(knex, "uploads", indexName))) {
    await knex.schema.alterTable("uploads", (t) => {
      t.index(["entity_id", "state", "issued_to"], indexName);
    });
  }
  if (await hasIndex(knex, "uploads", replacedIndexName)) {
    await knex.schema.alterTable("uploads", (t) => {
      t.dropIndex(["entity_id", "state"], replacedIndexName);
    });
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("uploads", (t) => {
    t.index(["entity_id", "state"], replacedIndexName);
  });
  await knex.schema.alterTable("uploads", (t) => {
    t.dropIndex(["entity_id", "state", "issued_to"], indexName);
  });
  await knex.schema.alterTable("uploads", (t) => {
    t.dropColumn("issued_to");
  });
}

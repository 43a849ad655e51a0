import type { Knex } from "knex";
import { addIndexResuming, dropIndexResuming } from "./resumable.js";

/**
 * Deduplication reads the newest version with a source hash: with `seq` in
 * the index that is one index lookup however many versions share the hash,
 * rather than a sort of all of them.
 */
export async function up(knex: Knex): Promise<void> {
  await addIndexResuming(knex, "versions", "versions_entity_id_source_hash_seq_index", (t) => {
    t.index(["entity_id", "source_hash", "seq"], "versions_entity_id_source_hash_seq_index");
  });
  await dropIndexResuming(knex, "versions", "versions_entity_id_source_hash_index", (t) => {
    t.dropIndex(["entity_id", "source_hash"]);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.index(["entity_id", "source_hash"]);
  });
  await knex.schema.alterTable("versions", (t) => {
    t.dropIndex(["entity_id", "source_hash", "seq"], "versions_entity_id_source_hash_seq_index");
  });
}

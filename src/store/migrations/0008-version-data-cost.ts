import type { Knex } from "knex";
import { versionDataCost } from "../../domain/version-data-cost.js";

/** Versions measured per round trip while the existing ones are measured. */
const batchSize = 500;

/**
 * Each version records what its variable data (package_json and
 * service_dependencies) costs to serve (versionDataCost), indexed with its
 * place in the entity's history, so that a page of ListVersions can stop
 * at a budget reading only the index: without it, a few hundred versions
 * each with a large package_json made one page hundreds of megabytes, or
 * seconds of CPU, which a single request could ask for. Versions recorded
 * before are measured here, once, in batches.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.integer("data_cost").notNullable().defaultTo(0);
  });
  for (let after = ""; ; ) {
    const rows: Array<{ id: string; service_dependencies: string; package_json: string | null }> = await knex("versions")
      .where("id", ">", after)
      .orderBy("id")
      .limit(batchSize)
      .select("id", "service_dependencies", "package_json");
    if (rows.length === 0) break;
    for (const row of rows) {
      const cost = versionDataCost(
        { serviceDependencies: row.service_dependencies, packageJson: row.package_json },
        JSON.parse(row.service_dependencies) as string[],
        row.package_json === null ? undefined : JSON.parse(row.package_json),
      );
      await knex("versions").where("id", row.id).update({ data_cost: cost });
    }
    after = rows[rows.length - 1]!.id;
  }
  await knex.schema.alterTable("versions", (t) => {
    t.index(["entity_id", "seq", "data_cost"], "versions_entity_id_seq_data_cost_index");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.dropIndex(["entity_id", "seq", "data_cost"], "versions_entity_id_seq_data_cost_index");
  });
  await knex.schema.alterTable("versions", (t) => {
    t.dropColumn("data_cost");
  });
}

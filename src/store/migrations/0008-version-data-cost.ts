import type { Knex } from "knex";
import { versionDataCost } from "../../domain/version-data-cost.js";
import { hasIndex } from "./has-index.js";

/** Versions measured per round trip while the existing ones are measured. */
const batchSize = 500;

const indexName = "versions_entity_id_seq_data_cost_index";

/**
 * Each version records what its variable data (package_json and
 * service_dependencies) costs to serve (versionDataCost), indexed with its
 * place in the entity's history, so that a page of ListVersions can stop
 * at a budget reading only the index: without it, a few hundred versions
 * each with a large package_json made one page hundreds of megabytes, or
 * seconds of CPU, which a single request could ask for. Versions recorded
 * before are measured here, once, a batch to a statement.
 */
export async function up(knex: Knex): Promise<void> {
  // MySQL commits each schema change at once, and the measuring below
  // commits as it goes, so a start stopped half-way (a probe's kill, a
  // deploy's deadline) leaves part of this done, unrecorded: every step
  // is skipped when already made, and the measuring carries on where it
  // stopped.
  if (!(await knex.schema.hasColumn("versions", "data_cost"))) {
    await knex.schema.alterTable("versions", (t) => {
      t.integer("data_cost").notNullable().defaultTo(0);
    });
  }
  for (let after = ""; ; ) {
    // Every version costs something (its service_dependencies' "[]" at
    // least), so 0 is one not yet measured.
    const rows: Array<{ id: string; service_dependencies: string; package_json: string | null }> = await knex("versions")
      .where("id", ">", after)
      .andWhere("data_cost", 0)
      .orderBy("id")
      .limit(batchSize)
      .select("id", "service_dependencies", "package_json");
    if (rows.length === 0) break;
    const bindings: Array<string | number> = [];
    for (const row of rows) {
      const cost = versionDataCost(
        { serviceDependencies: row.service_dependencies, packageJson: row.package_json },
        JSON.parse(row.service_dependencies) as string[],
        row.package_json === null ? undefined : JSON.parse(row.package_json),
      );
      bindings.push(row.id, cost);
    }
    await knex("versions")
      .whereIn(
        "id",
        rows.map((r) => r.id),
      )
      .update({ data_cost: knex.raw(`case id ${"when ? then ? ".repeat(rows.length)}end`, bindings) });
    after = rows[rows.length - 1]!.id;
  }
  if (!(await hasIndex(knex, "versions", indexName))) {
    await knex.schema.alterTable("versions", (t) => {
      t.index(["entity_id", "seq", "data_cost"], indexName);
    });
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => {
    t.dropIndex(["entity_id", "seq", "data_cost"], indexName);
  });
  await knex.schema.alterTable("versions", (t) => {
    t.dropColumn("data_cost");
  });
}

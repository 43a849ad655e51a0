// Migrations that change data, run on both databases: what a database
// upgraded from an earlier release holds afterwards.
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { migrateLatest } from "../src/store/migrate.js";
import { versionDataCost } from "../src/domain/version-data-cost.js";
import * as migration0008 from "../src/store/migrations/0008-version-data-cost.js";
import { type Backend, connectTestDatabase, createTestDatabase, mysqlAvailable } from "./support/env.js";

function defineMigrationsSuite(backend: Backend): void {
  const s = suite(`${backend}: migrations`);

  s("0008 measures the versions recorded before it: what their package_json and service_dependencies cost to serve", async () => {
    const tdb = await createTestDatabase(backend);
    const knex = connectTestDatabase(backend, tdb);
    try {
      await migrateLatest(knex);
      // As the release before 0008 left them: no data_cost.
      await migration0008.down(knex);
      await knex("entities").insert({ id: "e", last_seq: 2, created_at: new Date() });
      const row = (seq: number, dependencies: string, packageJson: string | null) => ({
        id: `v${seq}`,
        entity_id: "e",
        seq,
        version: `2020.01.01-00000${seq}`,
        source_hash: "c".repeat(64),
        upload_id: `u${seq}`,
        storage_path: `versions/e/v${seq}/package`,
        file_size_bytes: 1,
        service_dependencies: dependencies,
        package_json: packageJson,
        published_by: "owner",
        created_at: new Date(),
      });
      // Multi-byte characters: counted in bytes, as stored.
      await knex("versions").insert([row(1, '["a","b"]', '{"name":"zoë ✓"}'), row(2, "[]", null)]);
      await migration0008.up(knex);
      const measured = await knex("versions").orderBy("seq").select("seq", "data_cost");
      // Bytes of text (multi-byte characters in bytes), and 64 for each JSON value.
      assert.equal(
        measured.map((m: { data_cost: number | string }) => Number(m.data_cost)),
        [Buffer.byteLength('["a","b"]') + Buffer.byteLength('{"name":"zoë ✓"}') + 64 * 4, 2],
      );
      assert.is(versionDataCost({ serviceDependencies: '["a","b"]', packageJson: '{"name":"zoë ✓"}' }, ["a", "b"], { name: "zoë ✓" }), Number(measured[0]!.data_cost), "as a confirm records it");
    } finally {
      await knex.destroy();
      await tdb.drop();
    }
  });

  s.run();
}

defineMigrationsSuite("sqlite");
if (await mysqlAvailable()) defineMigrationsSuite("mysql");

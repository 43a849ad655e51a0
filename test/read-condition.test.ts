// The SQL that lets a statement read an entity's versions only for a caller
// who may read it (accessFactsSql's `readable`) agrees with decideRead, the
// rule the service decides by, for every combination of access facts, on
// both databases.
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { decideRead } from "../src/auth/policy.js";
import { type AccessFactRow, accessFactsSql, toAccessFacts } from "../src/store/access-store.js";
import { migrateLatest } from "../src/store/migrate.js";
import { rawRows, sql } from "../src/store/sql.js";
import { eventPageSql } from "../src/store/event-queries.js";
import { activeVersionSql, versionPageSql, versionWithFactsSql } from "../src/store/version-queries.js";
import { type Backend, connectTestDatabase, createTestDatabase, mysqlAvailable } from "./support/env.js";

function defineReadConditionSuite(backend: Backend): void {
  const s = suite(`${backend}: read condition`);

  s("a statement reads versions exactly where decideRead allows, for every combination of facts, org count and role", async () => {
    const tdb = await createTestDatabase(backend);
    const knex = connectTestDatabase(backend, tdb);
    try {
      await migrateLatest(knex);
      // One entity per combination of the four facts, each with one active version.
      for (let mask = 0; mask < 16; mask++) {
        const id = `e${mask}`;
        await knex("entities").insert({ id, last_seq: 1, created_at: new Date(), public_store: (mask & 8) !== 0, active_version_id: `v${mask}` });
        await knex("versions").insert({
          id: `v${mask}`,
          entity_id: id,
          seq: 1,
          version: "2020.01.01-000001",
          source_hash: "c".repeat(64),
          upload_id: `u${mask}`,
          storage_path: `versions/${id}/v${mask}/package`,
          file_size_bytes: 1,
          service_dependencies: "[]",
          published_by: "someone",
          created_at: new Date(),
        });
        await knex("entity_events").insert({ entity_id: id, seq: 1, type: "VERSION_CREATED", actor: "someone", occurred_at: new Date(), version_id: `v${mask}`, version: "2020.01.01-000001" });
        if (mask & 1) await knex("entity_publishers").insert({ entity_id: id, user_id: "me" });
        if (mask & 2) await knex("entity_shares").insert({ entity_id: id, user_id: "me" });
        if (mask & 4) await knex("entity_org_stores").insert({ entity_id: id, org_id: "org-3" });
      }
      const orgs = (n: number) => Array.from({ length: n }, (_, i) => `org-${i}`);
      // No orgs, a few (one join each), and more than the joins take (one EXISTS).
      const callers = [0, 4, 12].flatMap((n) => [
        { id: "me", roles: [], orgs: orgs(n) },
        { id: "me", roles: ["publisher"], orgs: orgs(n) },
        { id: "me", roles: ["admin"], orgs: orgs(n) },
      ]);
      let allowed = 0;
      for (const caller of callers) {
        for (let mask = 0; mask < 16; mask++) {
          const entity = `e${mask}`;
          const f = accessFactsSql(caller);
          const [row] = rawRows<AccessFactRow & { readable: unknown }>(
            await knex.raw(...toRaw(sql`select ${f.columns}, case when ${f.readable} then 1 else 0 end as readable from entities e ${f.joins} where e.id = ${entity}`)),
          );
          const decision = decideRead(caller, toAccessFacts(row));
          const what = `${JSON.stringify(caller)} on facts ${mask.toString(2).padStart(4, "0")}`;
          assert.is(Number(row!.readable) === 1, decision === "allow", what);
          if (decision === "allow") allowed++;
          // The version and event statements answer what they read exactly then.
          for (const q of [activeVersionSql(entity, caller), versionWithFactsSql(entity, `v${mask}`, caller), versionPageSql(entity, undefined, 10, caller, 1 << 20, backend)]) {
            const [answer] = rawRows<{ id: string | null }>(await knex.raw(...toRaw(q)));
            assert.is(answer!.id, decision === "allow" ? `v${mask}` : null, what);
          }
          const [event] = rawRows<{ version_id: string | null }>(await knex.raw(...toRaw(eventPageSql(entity, undefined, 10, caller))));
          assert.is(event!.version_id, decision === "allow" ? `v${mask}` : null, what);
        }
      }
      // Without the admin role a caller reads the entities with a fact that
      // holds for it: 15, or 14 for a caller in no org (org-3's store is
      // nothing to it); an admin reads all 16.
      assert.is(allowed, 14 + 14 + 16 + 2 * (15 + 15 + 16));
    } finally {
      await knex.destroy();
      await tdb.drop();
    }
  });

  s.run();
}

function toRaw(q: { text: string; params: readonly unknown[] }): [string, never] {
  return [q.text, q.params as never];
}

defineReadConditionSuite("sqlite");
if (await mysqlAvailable()) defineReadConditionSuite("mysql");

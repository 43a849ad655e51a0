import * as assert from "uvu/assert";
import { suite } from "uvu";
import { openDatabase, type Database } from "../../src/store/database.js";
import { migrateLatest } from "../../src/store/migrate.js";
import { activeVersionSql, pushFactsSql, versionByIdSql, versionPageSql, versionWithFactsSql } from "../../src/store/version-queries.js";
import type { Sql } from "../../src/store/sql.js";
import { VersionStore } from "../../src/store/version-store.js";
import { createTestDatabase, type TestDatabase } from "../support/env.js";

interface PlanRow {
  table: string | null;
  type: string | null;
  r_rows: number | string | null;
  Extra: string | null;
}

/**
 * The hot statements' plans on MySQL, on an entity with 20,000 versions:
 * every table read by an index, nothing sorted or materialised over the
 * history, and a page of ListVersions reading the same number of rows at
 * the start and at the end of it (ANALYZE's r_rows: rows actually read).
 */
export function queryPlansSuite() {
  const s = suite<{ tdb: TestDatabase; db: Database }>("mysql: query plans: every hot statement reads by index, at a cost flat in history");
  const history = 20_000;
  const caller = { id: "owner", roles: [], orgs: ["org-a", "org-b", "org-c"] };

  s.before(async (ctx) => {
    ctx.tdb = await createTestDatabase("mysql");
    ctx.db = openDatabase({ kind: "mysql", url: ctx.tdb.url, poolMax: 2, lockWaitTimeoutSeconds: 5, statementTimeoutMs: 60_000, acquireTimeoutMs: 5_000, readBatchMax: 1, confirmGroupMax: 1, preparedStatements: true });
    await migrateLatest(ctx.db.knex);
    const k = ctx.db.knex;
    await k("entities").insert({ id: "long", last_seq: history, created_at: new Date(), tip_version_id: `v${history}`, active_version_id: "v10" });
    await k("entity_publishers").insert({ entity_id: "long", user_id: "owner" });
    for (let from = 1; from <= history; from += 2_000) {
      await k("versions").insert(
        Array.from({ length: 2_000 }, (_, i) => {
          const n = from + i;
          return {
            id: `v${n}`,
            entity_id: "long",
            seq: n,
            version: `2020.01.01-${String(n).padStart(6, "0")}`,
            source_hash: String(n % 40).padStart(64, "c"),
            upload_id: `u${n}`,
            storage_path: `versions/long/u${n}/package`,
            file_size_bytes: n,
            service_dependencies: "[]",
            published_by: "owner",
            created_at: new Date(),
          };
        }),
      );
    }
    await k.raw("analyze table versions, entities");
  });
  s.after(async (ctx) => {
    await ctx.db?.knex.destroy();
    await ctx.tdb?.drop();
  });

  async function analyze(db: Database, q: Sql): Promise<PlanRow[]> {
    const [rows] = (await db.knex.raw(`analyze ${q.text}`, q.params as never)) as unknown as [PlanRow[]];
    return rows;
  }

  s("no statement sorts, makes a temporary table, or scans", async ({ db }) => {
    const statements: Record<string, Sql> = {
      "ListVersions, first page": versionPageSql("long", undefined, 50, caller),
      "ListVersions, last page": versionPageSql("long", 60, 50, caller),
      GetActiveVersion: activeVersionSql("long", caller),
      GetVersion: versionWithFactsSql("long", "v123", caller),
      "a version by id": versionByIdSql("long", "v123"),
      "a push's facts": pushFactsSql({
        entityId: "long",
        sourceHash: "c".repeat(63) + "7",
        version: "2020.01.01-000007",
        baseVersionId: `v${history}`,
        force: false,
        setAsActive: false,
        caller,
        authorize: () => "allow",
        uploadId: "u7",
      }),
    };
    for (const [name, q] of Object.entries(statements)) {
      const plan = await analyze(db, q);
      for (const row of plan) {
        assert.not.match(row.Extra ?? "", /filesort|temporary/i, `${name}: ${JSON.stringify(row)}`);
        if (row.table === "e" || row.table === "v" || row.table === "p" || row.table === "d") assert.is.not(row.type, "ALL", `${name}: ${JSON.stringify(row)}`);
        assert.ok(Number(row.r_rows ?? 0) <= 128, `${name} read ${row.r_rows} rows of ${row.table}: ${JSON.stringify(row)}`);
      }
    }
  });

  s("a page reads as many rows at the end of the history as at its start, and the store pages through it in order", async ({ db }) => {
    const read = async (before: number | undefined) => (await analyze(db, versionPageSql("long", before, 50, caller))).find((r) => r.table === "p")!;
    const first = Number((await read(undefined)).r_rows);
    const last = Number((await read(100)).r_rows);
    assert.ok(first <= 64 && last <= 64, `first page read ${first} rows, last ${last}`);
    const store = new VersionStore(db);
    const top = await store.listVersionsWithFacts("long", undefined, 50, caller);
    assert.ok(top.kind === "page" && top.versions[0]!.seq === history && top.versions[49]!.seq === history - 49 && top.hasMore);
    const end = await store.listVersionsWithFacts("long", 51, 50, caller);
    assert.ok(end.kind === "page" && end.versions.length === 50 && end.versions[49]!.seq === 1 && !end.hasMore);
  });

  return s;
}

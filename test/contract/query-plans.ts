import { defaultPageMaxBytes } from "../../src/config.js";
import * as assert from "uvu/assert";
import { suite } from "uvu";
import { openDatabase, type Database } from "../../src/store/database.js";
import { migrateLatest } from "../../src/store/migrate.js";
import { activeVersionSql, pushFactsSql, versionByIdSql, versionPageSql, versionWithFactsSql } from "../../src/store/version-queries.js";
import { eventPageSql, eventPositionSql, eventsAfterSql, eventsPollSql } from "../../src/store/event-queries.js";
import { EventStore } from "../../src/store/event-store.js";
import type { Sql } from "../../src/store/sql.js";
import { abandonedUploads, uploadStatesQuery, versionsExistingQuery } from "../../src/store/upload-store.js";
import { openUploadsQuery, VersionStore } from "../../src/store/version-store.js";
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
    // As many events, and a few other entities' events around them.
    await k("entities").update({ last_event_seq: history }).where("id", "long");
    for (const [entity, count] of [["long", history], ["other-a", 500], ["other-z", 500]] as const) {
      if (entity !== "long") await k("entities").insert({ id: entity, last_seq: 0, last_event_seq: count, created_at: new Date() });
      for (let from = 1; from <= count; from += 2_000) {
        await k("entity_events").insert(
          Array.from({ length: Math.min(2_000, count - from + 1) }, (_, i) => ({
            entity_id: entity,
            seq: from + i,
            type: "VERSION_CREATED",
            actor: "owner",
            occurred_at: new Date(),
            version_id: `v${from + i}`,
            version: `2020.01.01-${String(from + i).padStart(6, "0")}`,
          })),
        );
      }
    }
    await k.raw("analyze table versions, entities, entity_events");
  });
  s.after(async (ctx) => {
    await ctx.db?.knex.destroy();
    await ctx.tdb?.drop();
  });

  async function analyze(db: Database, q: Sql): Promise<PlanRow[]> {
    const [rows] = (await db.knex.raw(`analyze ${q.text}`, q.params as never)) as unknown as [PlanRow[]];
    return rows;
  }

  s("no statement sorts, makes a temporary table, or scans, but for a page's window over its own rows", async ({ db }) => {
    const statements: Record<string, Sql> = {
      "ListVersions, first page": versionPageSql("long", undefined, 50, caller, defaultPageMaxBytes, "mysql"),
      "ListVersions, last page": versionPageSql("long", 60, 50, caller, defaultPageMaxBytes, "mysql"),
      GetActiveVersion: activeVersionSql("long", caller),
      GetVersion: versionWithFactsSql("long", "v123", caller),
      "a version by id": versionByIdSql("long", "v123"),
      "ListEvents, first page": eventPageSql("long", undefined, 50, caller),
      "ListEvents, last page": eventPageSql("long", 60, 50, caller),
      "a watch's start": eventPositionSql("long", caller),
      "a watch's replay": eventsAfterSql("long", 10_000, 100),
      "the watches' poll": eventsPollSql(new Map([["other-z", 490], ["long", history - 5], ["other-a", 499], ["missing", 0]]), 1000),
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
        // A page's byte budget is summed over the page's own rows (a window
        // over at most 64 here): the only temporary table, never over the history.
        if (/filesort|temporary/i.test(row.Extra ?? "")) {
          assert.ok(name.startsWith("ListVersions") && row.table?.startsWith("<derived") === true && Number(row.r_rows) <= 64, `${name}: ${JSON.stringify(row)}`);
        }
        if (row.table === "e" || row.table === "v" || row.table === "p" || row.table === "q" || row.table === "d") assert.is.not(row.type, "ALL", `${name}: ${JSON.stringify(row)}`);
        assert.ok(Number(row.r_rows ?? 0) <= 128, `${name} read ${row.r_rows} rows of ${row.table}: ${JSON.stringify(row)}`);
      }
    }
  });

  /** How many times ANALYZE looked `table` up: for a table joined by key, the rows it read. */
  async function lookups(db: Database, q: Sql, table: string): Promise<number> {
    const [rows] = (await db.knex.raw(`analyze format=json ${q.text}`, q.params as never)) as unknown as [Array<Record<string, string>>];
    const found: number[] = [];
    const visit = (node: unknown): void => {
      if (node === null || typeof node !== "object") return;
      const t = node as { table_name?: unknown; r_loops?: unknown };
      if (t.table_name === table && typeof t.r_loops === "number") found.push(t.r_loops);
      for (const child of Object.values(node)) visit(child);
    };
    visit(JSON.parse(Object.values(rows[0]!)[0]!));
    assert.equal(found.length, 1, `ANALYZE names table ${table} once`);
    return found[0]!;
  }

  s("a page reads as many rows at the end of the history as at its start, and the store pages through it in order", async ({ db }) => {
    const read = async (before: number | undefined) => (await analyze(db, versionPageSql("long", before, 50, caller, defaultPageMaxBytes, "mysql"))).find((r) => r.table === "q")!;
    const first = Number((await read(undefined)).r_rows);
    const last = Number((await read(100)).r_rows);
    assert.ok(first <= 64 && last <= 64, `first page read ${first} rows, last ${last}`);
    // The index rows past the page (read to learn whether one follows) are
    // never looked up in the table.
    assert.is(await lookups(db, versionPageSql("long", undefined, 50, caller, defaultPageMaxBytes, "mysql"), "p"), 50);
    assert.is(await lookups(db, versionPageSql("long", undefined, 3, caller, defaultPageMaxBytes, "mysql"), "p"), 3);
    // A caller who may not read the entity is answered from the facts and
    // the index alone: no version's row (manifest and all) is read for it.
    const stranger = { id: "stranger", roles: [], orgs: [] };
    assert.is(await lookups(db, versionPageSql("long", undefined, 50, stranger, defaultPageMaxBytes, "mysql"), "p"), 0, "a stranger's page reads no version");
    // Nor any of the index: a refusal costs the same, and takes as long, however long the history.
    const strangerIndex = (await analyze(db, versionPageSql("long", undefined, 50, stranger, defaultPageMaxBytes, "mysql"))).filter((r) => r.table === "q");
    assert.ok(strangerIndex.every((r) => Number(r.r_rows ?? 0) === 0), `a stranger's page read the index: ${JSON.stringify(strangerIndex)}`);
    const store = new VersionStore(db);
    const top = await store.listVersionsWithFacts("long", undefined, 50, caller);
    assert.ok(top.kind === "page" && top.versions[0]!.seq === history && top.versions[49]!.seq === history - 49 && top.hasMore);
    const end = await store.listVersionsWithFacts("long", 51, 50, caller);
    assert.ok(end.kind === "page" && end.versions.length === 50 && end.versions[49]!.seq === 1 && !end.hasMore);
  });

  s("a page of events, too, reads as many rows at the end as at the start; the poll reads only what is new", async ({ db }) => {
    const read = async (before: number | undefined) => (await analyze(db, eventPageSql("long", before, 50, caller))).find((r) => r.table === "p")!;
    const [first, last] = [Number((await read(undefined)).r_rows), Number((await read(100)).r_rows)];
    assert.ok(first <= 64 && last <= 64, `first page read ${first} rows, last ${last}`);
    const stranger = { id: "stranger", roles: [], orgs: [] };
    const strangerRows = (await analyze(db, eventPageSql("long", undefined, 50, stranger))).filter((r) => r.table === "p");
    assert.ok(strangerRows.every((r) => Number(r.r_rows ?? 0) === 0), `a stranger's page of events read events: ${JSON.stringify(strangerRows)}`);
    const poll = await analyze(db, eventsPollSql(new Map([["other-z", 490], ["long", history - 5], ["other-a", 499]]), 1000));
    assert.ok(poll.every((r) => Number(r.r_rows ?? 0) <= 16), `the poll read more than the 16 new events: ${JSON.stringify(poll)}`);
    const store = new EventStore(db);
    const top = await store.page("long", undefined, 50, caller);
    assert.ok(top.kind === "page" && top.events[0]!.seq === history && top.events[49]!.seq === history - 49 && top.hasMore);
    const polled = await store.poll(new Map([["other-z", 490], ["long", history - 5], ["other-a", 499]]), 1000);
    assert.equal(polled.map((e) => `${e.entityId}:${e.seq}`), [
      ...Array.from({ length: 5 }, (_, i) => `long:${history - 4 + i}`),
      "other-a:500",
      ...Array.from({ length: 10 }, (_, i) => `other-z:${491 + i}`),
    ]);
  });

  s("a sweep reads only the abandoned uploads, however many are open", async ({ db }) => {
    const k = db.knex;
    const young = new Date();
    const old = new Date(Date.now() - 48 * 3600 * 1000);
    // Thousands open (any pusher can hold that many), five abandoned.
    for (let from = 0; from < 3_000; from += 1_000) {
      await k("uploads").insert(Array.from({ length: 1_000 }, (_, i) => ({ id: `open-${from + i}`, entity_id: `e${(from + i) % 300}`, state: "issued", created_at: young })));
    }
    await k("uploads").insert(Array.from({ length: 5 }, (_, i) => ({ id: `old-${i}`, entity_id: `e${i}`, state: "issued", created_at: old })));
    await k.raw("analyze table uploads");
    const cutoff = new Date(Date.now() - 24 * 3600 * 1000);
    const { sql, bindings } = abandonedUploads(k, cutoff, 100).toSQL().toNative();
    const plan = await analyze(db, { text: sql, params: bindings as readonly unknown[] });
    assert.ok(plan.every((r) => Number(r.r_rows ?? 0) <= 10), `the sweep's search read every open upload: ${JSON.stringify(plan)}`);
    assert.equal((await abandonedUploads(k, cutoff, 100)).map((r: { id: string }) => r.id).sort(), ["old-0", "old-1", "old-2", "old-3", "old-4"]);
  });

  s("upload-url counts only the caller's own open uploads on the entity, however many others hold there", async ({ db }) => {
    const k = db.knex;
    // Thousands open by other callers and from before issued_to (none), three by the caller.
    for (let from = 0; from < 3_000; from += 1_000) {
      await k("uploads").insert(
        Array.from({ length: 1_000 }, (_, i) => ({ id: `crowd-${from + i}`, entity_id: "crowded", state: "issued", issued_to: i % 2 === 0 ? `other-${i % 7}` : null, created_at: new Date() })),
      );
    }
    await k("uploads").insert(Array.from({ length: 3 }, (_, i) => ({ id: `mine-${i}`, entity_id: "crowded", state: "issued", issued_to: "owner", created_at: new Date() })));
    await k.raw("analyze table uploads");
    const { sql, bindings } = openUploadsQuery(k, "crowded", "owner").select(k.raw("1")).toSQL().toNative();
    const plan = await analyze(db, { text: sql, params: bindings as readonly unknown[] });
    for (const row of plan) {
      assert.is.not(row.type, "ALL", JSON.stringify(row));
      assert.ok(Number(row.r_rows ?? 0) <= 3, `the count read others' uploads: ${JSON.stringify(plan)}`);
    }
  });

  s("a sweep looks up a batch of listed blobs by primary key, each under its own entity, whatever the history", async ({ db }) => {
    const k = db.knex;
    // A batch's worth: versions of "long" spread over its history, some under another entity or with no row.
    const batch = Array.from({ length: 250 }, (_, i) => ({ entityId: i % 10 === 0 ? "other-a" : "long", id: `v${1 + i * 79}` }));
    const uploads = batch.map((v) => ({ entityId: v.entityId, id: v.id.replace("v", "u") }));
    // Each version's upload, confirmed.
    for (let from = 1; from <= history; from += 2_000) {
      await k("uploads").insert(Array.from({ length: 2_000 }, (_, i) => ({ id: `u${from + i}`, entity_id: "long", state: "confirmed", created_at: new Date() })));
    }
    await k.raw("analyze table uploads, versions");
    for (const [name, query, keys] of [
      ["the batch's upload states", uploadStatesQuery(k, uploads), uploads],
      ["the batch's versions", versionsExistingQuery(k, batch), batch],
    ] as const) {
      const { sql, bindings } = query.toSQL().toNative();
      const plan = await analyze(db, { text: sql, params: bindings as readonly unknown[] });
      for (const row of plan) {
        assert.is.not(row.type, "ALL", `${name}: ${JSON.stringify(row)}`);
        assert.ok(Number(row.r_rows ?? 0) <= keys.length, `${name} read ${row.r_rows} rows for ${keys.length} keys: ${JSON.stringify(row)}`);
      }
    }
    // Another entity's row under the same id is not the batch's.
    const found = (await versionsExistingQuery(k, batch)) as Array<{ entity_id: string; id: string }>;
    assert.is(found.length, batch.filter((v) => v.entityId === "long").length);
    assert.ok(found.every((r) => r.entity_id === "long"));
  });

  return s;
}

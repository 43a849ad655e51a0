import { test } from "uvu";
import * as assert from "uvu/assert";
import { accessFactsSql } from "../../src/store/access-store.js";
import { sql } from "../../src/store/sql.js";

const caller = (orgs: number) => ({ id: "u", roles: [], orgs: Array.from({ length: orgs }, (_, i) => `org-${i}`) });
const placeholders = (sql: string) => sql.split("?").length - 1;

test("each part's parameters match its placeholders, for every org count", () => {
  for (let n = 0; n <= 40; n++) {
    for (const hasPublishers of [false, true]) {
      const f = accessFactsSql(caller(n), { hasPublishers });
      assert.is(placeholders(f.columns.text), f.columns.params.length, `columns, ${n} orgs`);
      assert.is(placeholders(f.joins.text), f.joins.params.length, `joins, ${n} orgs`);
      assert.is(placeholders(f.readable.text), f.readable.params.length, `readable, ${n} orgs`);
      const admin = accessFactsSql({ ...caller(n), roles: ["admin"] }, { hasPublishers });
      assert.is(admin.readable.text, "1 = 1", `an admin reads everywhere, ${n} orgs`);
      assert.is(placeholders(admin.columns.text) + placeholders(admin.joins.text), admin.columns.params.length + admin.joins.params.length);
      for (let i = 0; i < n; i++) assert.ok([...f.columns.params, ...f.joins.params].includes(`org-${i}`), `org-${i} of ${n}`);
    }
  }
});

test("org counts share statement shapes: one per power of two", () => {
  const joined = new Set<string>();
  for (let n = 1; n <= 8; n++) joined.add(accessFactsSql(caller(n)).joins.text);
  assert.is(joined.size, 4); // 1, 2, 4, 8
  const shapes = new Set<string>();
  for (let n = 9; n <= 64; n++) shapes.add(accessFactsSql(caller(n)).columns.text);
  assert.is(shapes.size, 3); // 16, 32, 64
  assert.is(accessFactsSql(caller(9)).columns.text, accessFactsSql(caller(16)).columns.text);
});

test("has_publishers is read only when asked for", () => {
  assert.match(accessFactsSql(caller(1), { hasPublishers: true }).columns.text, /exists\(select 1 from entity_publishers ah/);
  assert.match(accessFactsSql(caller(1)).columns.text, /null as has_publishers/);
});

test("a statement built with sql`` carries every fragment's values where its text stands", () => {
  const f = accessFactsSql({ id: "me", roles: [], orgs: Array.from({ length: 12 }, (_, i) => `o${i}`) }, { hasPublishers: true });
  const q = sql`select ${f.columns}, (select 1 from versions d where d.source_hash = ${"hash"}) from entities e ${f.joins} where e.id = ${"ent"}`;
  assert.is(placeholders(q.text), q.params.length);
  // In the text's order: the orgs of the columns' EXISTS, the hash, the joins' user ids, the entity.
  assert.equal(q.params, [...Array.from({ length: 16 }, (_, i) => `o${Math.min(i, 11)}`), "hash", "me", "me", "ent"]);
});

test.run();

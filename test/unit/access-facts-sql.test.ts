import { test } from "uvu";
import * as assert from "uvu/assert";
import { accessFactsSql } from "../../src/store/access-store.js";

const caller = (orgs: number) => ({ id: "u", roles: [], orgs: Array.from({ length: orgs }, (_, i) => `org-${i}`) });
const placeholders = (sql: string) => sql.split("?").length - 1;

test("each part's parameters match its placeholders, for every org count", () => {
  for (let n = 0; n <= 40; n++) {
    for (const hasPublishers of [false, true]) {
      const f = accessFactsSql(caller(n), { hasPublishers });
      assert.is(placeholders(f.columns), f.columnParams.length, `columns, ${n} orgs`);
      assert.is(placeholders(f.joins), f.joinParams.length, `joins, ${n} orgs`);
      for (let i = 0; i < n; i++) assert.ok([...f.columnParams, ...f.joinParams].includes(`org-${i}`), `org-${i} of ${n}`);
    }
  }
});

test("org counts share statement shapes: one per power of two", () => {
  const joined = new Set<string>();
  for (let n = 1; n <= 8; n++) joined.add(accessFactsSql(caller(n)).joins);
  assert.is(joined.size, 4); // 1, 2, 4, 8
  const shapes = new Set<string>();
  for (let n = 9; n <= 64; n++) shapes.add(accessFactsSql(caller(n)).columns);
  assert.is(shapes.size, 3); // 16, 32, 64
  assert.is(accessFactsSql(caller(9)).columns, accessFactsSql(caller(16)).columns);
});

test("has_publishers is read only when asked for", () => {
  assert.match(accessFactsSql(caller(1), { hasPublishers: true }).columns, /exists\(select 1 from entity_publishers ah/);
  assert.match(accessFactsSql(caller(1)).columns, /null as has_publishers/);
});

test.run();

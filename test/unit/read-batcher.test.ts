import { test } from "uvu";
import * as assert from "uvu/assert";
import { readBatcher } from "../../src/store/read-batcher.js";

type Row = Record<string, unknown>;

/**
 * A stand-in for the database that understands exactly the statements the
 * batcher writes: `(select N as batch_part, <body>)` parts joined by
 * `union all`, each taking the body's parameters in turn. The body here is
 * `select ? as id`, and an id "none" selects no row, "two" two rows, and
 * "fail" fails the statement.
 */
function fakeDatabase(options: { partAsString?: boolean } = {}) {
  const statements: Array<{ sql: string; params: readonly unknown[] }> = [];
  const run = async <T>(sql: string, params: readonly unknown[]): Promise<T[]> => {
    statements.push({ sql, params });
    await new Promise((r) => setTimeout(r, 1));
    const parts = sql.split(" union all ");
    const perPart = params.length / parts.length;
    const rows: Row[] = [];
    parts.forEach((part, i) => {
      const match = /^\(select (\d+) as batch_part, (.*)\)$/.exec(part);
      const id = params[i * perPart];
      if (id === "fail") throw new Error("statement failed");
      if (id === "down") throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
      if (id === "slow") throw Object.assign(new Error("Query execution was interrupted (max_statement_time exceeded)"), { code: "ER_STATEMENT_TIMEOUT", errno: 1969 });
      const base: Row = match === null ? {} : { batch_part: options.partAsString === true ? match[1] : Number(match[1]) };
      if (id === "none") return;
      // A part's second parameter, when it has one, comes back as "tag".
      const tag = perPart > 1 ? { tag: params[i * perPart + 1] } : {};
      // Unlike a database, this one answers even the NULL padding parts,
      // so that the batcher is seen to drop their rows.
      rows.push({ ...base, id, n: 1, ...tag });
      if (id === "two") rows.push({ ...base, id, n: 2, ...tag });
    });
    // The database may return a union's rows in any order.
    return rows.reverse() as T[];
  };
  return { run, statements };
}

const sql = "select ? as id";
const ids = (rows: Row[]) => rows.map((r) => `${String(r["id"])}${r["n"] === 2 ? "#2" : ""}`).sort();

test("reads queued in one turn go as one statement, padded to a power of two; each gets only its own rows", async () => {
  const db = fakeDatabase();
  const sizes: number[] = [];
  const read = readBatcher(db.run, { maxBatch: 8, onBatch: (n) => sizes.push(n) });
  const results = await Promise.all(["a", "none", "two"].map((id) => read<Row>(sql, [id])));
  assert.equal(results.map(ids), [["a"], [], ["two", "two#2"]]);
  assert.is(db.statements.length, 1);
  assert.is(db.statements[0]!.sql.split(" union all ").length, 4);
  assert.equal(db.statements[0]!.params, ["a", "none", "two", null]);
  assert.equal(sizes, [3]);
});

test("a read alone is sent as written, without the batch column", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  assert.equal(await read<Row>(sql, ["a"]), [{ id: "a", n: 1 }]);
  assert.equal(db.statements, [{ sql, params: ["a"] }]);
});

test("a read is never held for others: one issued after a batch left goes at once, in a batch of its own", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const first = Promise.all([read<Row>(sql, ["a"]), read<Row>(sql, ["b"])]);
  await new Promise((r) => setImmediate(r));
  const late = read<Row>(sql, ["c"]);
  assert.equal((await first).map(ids), [["a"], ["b"]]);
  assert.equal(ids(await late), ["c"]);
  assert.equal(
    db.statements.map((s) => s.params),
    [["a", "b"], ["c"]],
  );
});

test("different statements are batched apart", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const other = "select ? as id, 1 as other";
  const results = await Promise.all([read<Row>(sql, ["a"]), read<Row>(other, ["b"]), read<Row>(sql, ["c"])]);
  assert.equal(results.map(ids), [["a"], ["b"], ["c"]]);
  assert.equal(db.statements.map((s) => s.params).sort(), [["a", "c"], ["b"]]);
});

test("more reads than maxBatch are split into even batches", async () => {
  const db = fakeDatabase();
  const sizes: number[] = [];
  const read = readBatcher(db.run, { maxBatch: 8, onBatch: (n) => sizes.push(n) });
  const wanted = Array.from({ length: 9 }, (_, i) => `r${i}`);
  const results = await Promise.all(wanted.map((id) => read<Row>(sql, [id])));
  assert.equal(results.map(ids), wanted.map((id) => [id]));
  assert.equal(sizes, [5, 4]);
  assert.equal(db.statements.map((s) => s.sql.split(" union all ").length), [8, 4]);
});

test("a failed batch is retried read by read: only the failing read fails", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const results = await Promise.allSettled(["a", "fail", "b"].map((id) => read<Row>(sql, [id])));
  assert.equal(
    results.map((r) => (r.status === "fulfilled" ? ids(r.value) : (r.reason as Error).message)),
    [["a"], "statement failed", ["b"]],
  );
  assert.equal(
    db.statements.map((s) => s.params),
    [["a", "fail", "b", null], ["a"], ["fail"], ["b"]],
  );
});

test("an unreachable database fails the whole batch at once, with no retries", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const results = await Promise.allSettled(["a", "down"].map((id) => read<Row>(sql, [id])));
  assert.equal(
    results.map((r) => r.status === "rejected" && (r.reason as { code?: string }).code),
    ["ECONNREFUSED", "ECONNREFUSED"],
  );
  assert.is(db.statements.length, 1);
});

test("each part gets its own read's parameters, in order, and NULLs pad every parameter of the extra parts", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const two = "select ? as id, ? as tag";
  const results = await Promise.all([["a", "x"], ["b", "y"], ["c", "z"]].map((p) => read<Row>(two, p)));
  assert.equal(
    results.map((rows) => rows.map((r) => `${String(r["id"])}:${String(r["tag"])}`)),
    [["a:x"], ["b:y"], ["c:z"]],
  );
  assert.equal(db.statements[0]!.params, ["a", "x", "b", "y", "c", "z", null, null]);
});

test("the part column may come back as a string", async () => {
  const db = fakeDatabase({ partAsString: true });
  const read = readBatcher(db.run, { maxBatch: 8 });
  const results = await Promise.all(["a", "b", "c"].map((id) => read<Row>(sql, [id])));
  assert.equal(results.map(ids), [["a"], ["b"], ["c"]]);
});

test("a statement that ran out of time fails the whole batch at once, with no retries", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const results = await Promise.allSettled(["a", "slow"].map((id) => read<Row>(sql, [id])));
  assert.equal(
    results.map((r) => r.status),
    ["rejected", "rejected"],
  );
  assert.is(db.statements.length, 1);
});

test("whatever throws inside a batch, every read of it is answered", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, {
    maxBatch: 8,
    onBatch: () => {
      throw new Error("metrics broke");
    },
  });
  const results = await Promise.allSettled(["a", "b"].map((id) => read<Row>(sql, [id])));
  assert.equal(
    results.map((r) => r.status === "rejected" && (r.reason as Error).message),
    ["metrics broke", "metrics broke"],
  );
});

test("SQL that is not one select is refused, not run read by read", async () => {
  const db = fakeDatabase();
  const read = readBatcher(db.run, { maxBatch: 8 });
  const results = await Promise.allSettled(["a", "b"].map((id) => read<Row>("update t set x = ?", [id])));
  assert.equal(
    results.map((r) => r.status === "rejected" && /not a select/.test((r.reason as Error).message)),
    [true, true],
  );
  assert.is(db.statements.length, 0);
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { bytesPerJsonValue, jsonShape, versionDataCost } from "../../src/domain/version-data-cost.js";

test("a JSON value's shape: every value counted through, depth from 1 for a scalar", () => {
  assert.equal(jsonShape(1), { values: 1, depth: 1 });
  assert.equal(jsonShape({}), { values: 1, depth: 1 });
  assert.equal(jsonShape({ a: [1, 2, { b: null }], c: "x" }), { values: 7, depth: 4 });
  // Deeper than the call stack goes, without throwing.
  let deep: unknown = 0;
  for (let i = 0; i < 20_000; i++) deep = [deep];
  assert.equal(jsonShape(deep), { values: 20_001, depth: 20_001 });
});

test("a version's data cost: its stored bytes, and as much again per value as the values cost to serve", () => {
  const cost = (deps: string[], manifest: unknown) =>
    versionDataCost({ serviceDependencies: JSON.stringify(deps), packageJson: manifest === undefined ? null : JSON.stringify(manifest) }, deps, manifest);
  assert.is(cost([], undefined), 2, "[] and no manifest");
  assert.is(cost(["svc-a"], { name: "x" }), Buffer.byteLength('["svc-a"]') + Buffer.byteLength('{"name":"x"}') + 3 * bytesPerJsonValue);
  // The same bytes, many more values: many times the cost.
  const manyValues = { a: Array(1000).fill({}) };
  const oneString = { a: "x".repeat(JSON.stringify(manyValues).length - 8) };
  assert.is(JSON.stringify(oneString).length, JSON.stringify(manyValues).length);
  assert.ok(cost([], manyValues) > 10 * cost([], oneString));
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { decidePush } from "../../src/domain/push-rules.js";

const dup = { id: "v1" };

test("first push needs no base", () => {
  assert.equal(decidePush({ duplicate: undefined, tipVersionId: undefined }, { baseVersionId: "", force: false }), { kind: "proceed" });
});

test("a base named on an entity with no versions is stale", () => {
  assert.equal(decidePush({ duplicate: undefined, tipVersionId: undefined }, { baseVersionId: "v9", force: false }), { kind: "stale" });
});

test("the tip as base proceeds; any other base or none is stale", () => {
  const state = { duplicate: undefined, tipVersionId: "v2" };
  assert.equal(decidePush(state, { baseVersionId: "v2", force: false }), { kind: "proceed" });
  assert.equal(decidePush(state, { baseVersionId: "v1", force: false }), { kind: "stale" });
  assert.equal(decidePush(state, { baseVersionId: "", force: false }), { kind: "stale" });
});

test("deduplication comes before push protection", () => {
  assert.equal(decidePush({ duplicate: dup, tipVersionId: "v2" }, { baseVersionId: "v1", force: false }), { kind: "existing", version: dup });
  assert.equal(decidePush({ duplicate: dup, tipVersionId: "v2" }, { baseVersionId: "", force: false }), { kind: "existing", version: dup });
});

test("force skips deduplication but never push protection", () => {
  assert.equal(decidePush({ duplicate: dup, tipVersionId: "v2" }, { baseVersionId: "v1", force: true }), { kind: "stale" });
  assert.equal(decidePush({ duplicate: dup, tipVersionId: "v2" }, { baseVersionId: "v2", force: true }), { kind: "proceed" });
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { SealTurns } from "../../src/api/seal-turns.js";

const never = new AbortController().signal;

test("a free entity's turn is taken at once; others wait for its release, then get none and decide again", async () => {
  const turns = new SealTurns();
  const release = await turns.take("e1", never);
  assert.type(release, "function");
  const order: string[] = [];
  const waiters = [turns.take("e1", never), turns.take("e1", never)].map((p) => p.then((r) => order.push(r === undefined ? "woken" : "took")));
  const other = await turns.take("e2", never);
  assert.type(other, "function", "another entity is not held up");
  await new Promise((r) => setImmediate(r));
  assert.equal(order, [], "waiters wait while the turn is held");
  release!();
  await Promise.all(waiters);
  assert.equal(order, ["woken", "woken"]);
  const again = await turns.take("e1", never);
  assert.type(again, "function", "the released turn can be taken again");
});

test("a waiter stops waiting with its signal's reason", async () => {
  const turns = new SealTurns();
  await turns.take("e", never);
  const controller = new AbortController();
  const waiting = turns.take("e", controller.signal);
  controller.abort(new Error("deadline"));
  try {
    await waiting;
    assert.unreachable("should have been refused");
  } catch (error) {
    assert.is((error as Error).message, "deadline");
  }
});

test("a late release of a turn someone else now holds does not free theirs", async () => {
  const turns = new SealTurns();
  const first = (await turns.take("e", never))!;
  first();
  const second = (await turns.take("e", never))!;
  first();
  let woken = false;
  void turns.take("e", never).then(() => (woken = true));
  await new Promise((r) => setImmediate(r));
  assert.is(woken, false);
  second();
});

test("a turn of the entity that ended after the caller decided sends it to decide again; one that ended before, or another entity's, does not", async () => {
  const turns = new SealTurns();
  const before = turns.mark();
  (await turns.take("e", never))!();
  const decided = turns.mark();
  assert.ok((await turns.take("e", never, before)) === undefined, "e's turn ended after the decision: decide again");
  (await turns.take("other", never))!();
  const release = await turns.take("e", never, decided);
  assert.type(release, "function", "nothing of e ended since");
  release!();
});

test.run();

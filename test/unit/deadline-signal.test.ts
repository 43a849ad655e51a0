import { test } from "uvu";
import * as assert from "uvu/assert";
import { deadlineSignal } from "../../src/rpc/deadline-signal.js";

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("aborts with the timeout's reason when the time runs out", async () => {
  const parent = new AbortController();
  const d = deadlineSignal(parent.signal, 10, () => "deadline");
  assert.is(d.signal.aborted, false);
  await tick(30);
  assert.is(d.signal.aborted, true);
  assert.is(d.signal.reason, "deadline");
  // The parent aborting later changes nothing.
  parent.abort("gone");
  assert.is(d.signal.reason, "deadline");
});

test("aborts with the parent's reason when the parent aborts first, and its timer no longer fires", async () => {
  const parent = new AbortController();
  let timeouts = 0;
  const d = deadlineSignal(parent.signal, 10, () => ++timeouts);
  parent.abort("gone");
  assert.is(d.signal.reason, "gone");
  await tick(30);
  assert.is(timeouts, 0);
});

test("an already aborted parent gives an aborted signal at once", () => {
  const parent = new AbortController();
  parent.abort("gone");
  const d = deadlineSignal(parent.signal, 1_000, () => "deadline");
  assert.is(d.signal.aborted, true);
  assert.is(d.signal.reason, "gone");
  d.dispose();
});

test("after dispose neither the timer nor the parent aborts it, and the parent has no listener left", async () => {
  const parent = new AbortController();
  let listeners = 0;
  const add = parent.signal.addEventListener.bind(parent.signal);
  const remove = parent.signal.removeEventListener.bind(parent.signal);
  parent.signal.addEventListener = ((...args: Parameters<typeof add>) => (listeners++, add(...args))) as typeof add;
  parent.signal.removeEventListener = ((...args: Parameters<typeof remove>) => (listeners--, remove(...args))) as typeof remove;
  const d = deadlineSignal(parent.signal, 10, () => "deadline");
  assert.is(listeners, 1);
  d.dispose();
  assert.is(listeners, 0);
  parent.abort("gone");
  await tick(30);
  assert.is(d.signal.aborted, false);
});

test("without a parent, only the time limit applies", async () => {
  const d = deadlineSignal(undefined, 5, () => "deadline");
  await tick(20);
  assert.is(d.signal.reason, "deadline");
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { sharedReading } from "../../src/ops/shared-reading.js";

/** A shared reading of age 1 s on a clock the test sets, whose reads it counts and settles by hand. */
function controlled() {
  const c = { reads: 0, clock: 0, release: (_n: number) => {} };
  const reading = sharedReading(
    () => {
      c.reads++;
      return new Promise<number>((resolve) => (c.release = resolve));
    },
    1_000,
    () => c.clock,
  );
  return { c, reading };
}

test("callers at once share one read; a later one reads again once the reading is older than its age", async () => {
  const { c, reading } = controlled();
  const many = Array.from({ length: 100 }, () => reading());
  assert.is(c.reads, 1, "a flood of callers is one read in flight");
  c.release(7);
  assert.equal(await Promise.all(many), Array(100).fill(7));
  c.clock = 1_000;
  assert.is(await reading(), 7, "still fresh");
  assert.is(c.reads, 1);
  c.clock = 1_001;
  const next = reading();
  assert.is(c.reads, 2, "older than its age: read again");
  c.release(8);
  assert.is(await next, 8);
  reading.reset();
  void reading();
  assert.is(c.reads, 3, "reset forgets it");
  c.release(9);
});

test("a read still running is shared however long it takes: a hung dependency gets one read, not one per interval", async () => {
  const { c, reading } = controlled();
  const first = reading();
  c.clock = 60_000;
  const later = reading();
  assert.is(c.reads, 1, "still one read in flight a minute later");
  c.release(5);
  assert.equal(await Promise.all([first, later]), [5, 5]);
  c.clock = 61_000;
  assert.is(await reading(), 5, "fresh: its age counts from when it came");
  assert.is(c.reads, 1);
});

test("a failed read is shared too, for its age, and is not an unhandled rejection when nobody waits for it", async () => {
  let reads = 0;
  let clock = 0;
  const reading = sharedReading(
    async () => {
      reads++;
      throw new Error("database down");
    },
    1_000,
    () => clock,
  );
  // Dropped: were it an unhandled rejection, Node would end the test run.
  void reading();
  await new Promise((resolve) => setImmediate(resolve));
  const failures = await Promise.allSettled([reading(), reading()]);
  assert.equal(
    failures.map((f) => f.status),
    ["rejected", "rejected"],
  );
  assert.is(reads, 1, "a flood during an outage does not retry per caller");
  clock = 2_000;
  await reading().catch(() => undefined);
  assert.is(reads, 2);
});

test("a negative age shares a reading only while it is in flight, even when the clock steps back", async () => {
  let clock = 5_000;
  let reads = 0;
  const reading = sharedReading(
    async () => {
      reads++;
      await new Promise((resolve) => setTimeout(resolve, 10));
      return reads;
    },
    -1,
    () => clock,
  );
  assert.equal(await Promise.all([reading(), reading(), reading()]), [1, 1, 1], "shared while in flight");
  clock = 4_000;
  assert.is(await reading(), 2, "a new reading once the last one is done, whatever the clock says");
});

test.run();

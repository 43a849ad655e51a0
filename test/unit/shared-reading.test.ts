import { test } from "uvu";
import * as assert from "uvu/assert";
import { sharedReading } from "../../src/ops/shared-reading.js";

test("callers at once share one read; a later one reads again once the reading is older than its age", async () => {
  let reads = 0;
  let release!: (n: number) => void;
  let clock = 0;
  const reading = sharedReading(
    () => {
      reads++;
      return new Promise<number>((resolve) => (release = resolve));
    },
    1_000,
    () => clock,
  );
  const many = Array.from({ length: 100 }, () => reading());
  assert.is(reads, 1, "a flood of callers is one read in flight");
  release(7);
  assert.equal(await Promise.all(many), Array(100).fill(7));
  clock = 1_000;
  assert.is(await reading(), 7, "still fresh");
  assert.is(reads, 1);
  clock = 1_001;
  const next = reading();
  assert.is(reads, 2, "older than its age: read again");
  release(8);
  assert.is(await next, 8);
  reading.reset();
  void reading();
  assert.is(reads, 3, "reset forgets it");
  release(9);
});

test("a read still running is shared however long it takes: a hung dependency gets one read, not one per interval", async () => {
  let reads = 0;
  let release!: (n: number) => void;
  let clock = 0;
  const reading = sharedReading(
    () => {
      reads++;
      return new Promise<number>((resolve) => (release = resolve));
    },
    1_000,
    () => clock,
  );
  const first = reading();
  clock = 60_000;
  const later = reading();
  assert.is(reads, 1, "still one read in flight a minute later");
  release(5);
  assert.equal(await Promise.all([first, later]), [5, 5]);
  clock = 61_000;
  assert.is(await reading(), 5, "fresh: its age counts from when it came");
  assert.is(reads, 1);
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

test.run();

// The event hub's delivery over an event log held in memory (its EventSource
// is a two-method interface): order, and what a watch is told when events
// it still needs were deleted for age. The hub against real databases, on
// every protocol, is in test/contract/watch.ts.
import { ConnectError } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { reasonOf } from "../../src/errors/api-error.js";
import { EventHub, type EventSource } from "../../src/events/event-hub.js";
import type { EventRecord } from "../../src/store/event-log.js";

/** An entity's event log, as the database would answer the hub's two reads. */
class MemoryLog implements EventSource {
  events: EventRecord[] = [];

  append(entityId: string, count: number): void {
    const last = this.events.filter((e) => e.entityId === entityId).reduce((n, e) => Math.max(n, e.seq), 0);
    for (let seq = last + 1; seq <= last + count; seq++) {
      this.events.push({
        entityId,
        seq,
        type: "VERSION_CREATED",
        actor: "alice",
        occurredAt: new Date(),
        versionId: `v${seq}`,
        version: undefined,
        previousActiveVersionId: undefined,
        accessKind: undefined,
        accessSubject: undefined,
      });
    }
  }

  /** Deletes the entity's events up to `through`, as the sweeper does. */
  prune(entityId: string, through: number): void {
    this.events = this.events.filter((e) => e.entityId !== entityId || e.seq > through);
  }

  async after(entityId: string, afterSeq: number, limit: number): Promise<EventRecord[]> {
    return this.events.filter((e) => e.entityId === entityId && e.seq > afterSeq).slice(0, limit);
  }

  async poll(cursors: ReadonlyMap<string, number>, limit: number): Promise<EventRecord[]> {
    return this.events.filter((e) => cursors.has(e.entityId) && e.seq > cursors.get(e.entityId)!).slice(0, limit);
  }
}

const hubOver = (log: MemoryLog, onGap?: (entityId: string, afterSeq: number, nextSeq: number) => void) =>
  new EventHub(log, { pollIntervalMs: 10_000, keepaliveMs: 10_000, maxWatches: 10, maxWatchesPerCaller: 10, ...(onGap === undefined ? {} : { onGap }) });
const never = new AbortController().signal;

/** What a watch's next() rejected with: its catalog reason and metadata-bearing message. */
async function rejection(promise: Promise<unknown>): Promise<{ reason: string | undefined; message: string }> {
  try {
    await promise;
  } catch (error) {
    assert.instance(error, ConnectError);
    return { reason: reasonOf(error as ConnectError), message: (error as ConnectError).rawMessage };
  }
  throw new Error("next() did not reject");
}

/** The promise's value, or "waited" when it has not settled within `ms`: a test that fails rather than hangs. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | "waited"> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<"waited">((resolve) => (timer = setTimeout(() => resolve("waited"), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

test("a watch replays, then follows, each event once and in order", async () => {
  const log = new MemoryLog();
  log.append("e", 5);
  const hub = hubOver(log);
  const watch = hub.open("e", "alice");
  watch.start(2, 5);
  const seen: number[] = [];
  for (const e of await watch.next(never)) {
    seen.push(e.seq);
    watch.passed(e.seq);
  }
  log.append("e", 2);
  hub.recorded(["e"]);
  for (const e of await watch.next(never)) {
    seen.push(e.seq);
    watch.passed(e.seq);
  }
  assert.equal(seen, [3, 4, 5, 6, 7]);
  watch.close();
  await hub.close(0);
});

test("a change of this process committed while an entity's first watch reads where it stands is delivered at once, not at the next full poll", async () => {
  const log = new MemoryLog();
  log.append("e", 3);
  const hub = hubOver(log); // a full poll every 10 s
  const watch = hub.open("e", "alice");
  // The watch has read that event 3 is the last; before it starts, event 4 commits here and is announced.
  log.append("e", 1);
  hub.recorded(["e"]);
  await new Promise((resolve) => setTimeout(resolve, 20)); // the prompted poll runs, with no cursor for e yet
  watch.start(3, 3);
  const got = await within(watch.next(never), 2_000);
  assert.equal(got === "waited" ? got : got.map((e) => e.seq), [4]);
  watch.close();
  await hub.close(0);
});

test("a watch behind events that were deleted for age ends with EVENTS_EXPIRED, naming the last one deleted", async () => {
  const log = new MemoryLog();
  log.append("e", 10);
  const hub = hubOver(log);
  const watch = hub.open("e", "alice");
  watch.start(2, 10);
  log.prune("e", 5);
  const { reason, message } = await rejection(watch.next(never));
  assert.is(reason, "EVENTS_EXPIRED");
  assert.match(message, `up to "5" are no longer kept`);
  assert.match(message, `after "2"`);
  // From the last deleted event on, nothing is missing.
  const fresh = hub.open("e", "alice");
  fresh.start(5, 10);
  assert.equal((await fresh.next(never)).map((e) => e.seq), [6, 7, 8, 9, 10]);
  for (const w of [watch, fresh]) w.close();
  await hub.close(0);
});

test("a watch resuming from events the hub still holds in memory, but another replica deleted for age, is told EVENTS_EXPIRED", async () => {
  const log = new MemoryLog();
  log.append("e", 6);
  const hub = hubOver(log);
  // A live watch brings events 7 to 10 into the hub's memory.
  const live = hub.open("e", "alice");
  live.start(6, 6);
  log.append("e", 4);
  hub.recorded(["e"]);
  assert.equal((await live.next(never)).map((e) => e.seq), [7, 8, 9, 10]);
  // Another replica's sweeper deletes 1 to 8; this hub still holds 7 to 10.
  log.prune("e", 8);
  const resumed = hub.open("e", "alice");
  resumed.start(7, 10);
  const { reason, message } = await rejection(resumed.next(never));
  assert.is(reason, "EVENTS_EXPIRED");
  assert.match(message, `up to "8"`);
  // From what is kept, memory serves as before.
  const kept = hub.open("e", "alice");
  kept.start(8, 10);
  assert.equal((await kept.next(never)).map((e) => e.seq), [9, 10]);
  for (const w of [live, resumed, kept]) w.close();
  await hub.close(0);
});

test("events deleted before the poller read them: the hub reads on past the gap, and a watch that needed them is told", async () => {
  const log = new MemoryLog();
  log.append("e", 3);
  const gaps: string[] = [];
  const hub = hubOver(log, (entityId, afterSeq, nextSeq) => gaps.push(`${entityId} ${afterSeq}..${nextSeq}`));
  const behind = hub.open("e", "alice");
  behind.start(3, 3);
  log.append("e", 5);
  log.prune("e", 6);
  hub.recorded(["e"]);
  const { reason, message } = await rejection(behind.next(never));
  assert.is(reason, "EVENTS_EXPIRED");
  assert.match(message, `up to "6"`);
  assert.equal(gaps, ["e 3..7"], "the gap is reported, once");
  // A watch from where the hub now stands goes on with the next events.
  const current = hub.open("e", "alice");
  current.start(8, 8);
  log.append("e", 1);
  hub.recorded(["e"]);
  assert.equal((await current.next(never)).map((e) => e.seq), [9]);
  for (const w of [behind, current]) w.close();
  await hub.close(0);
});

test("a change recorded here reads only its entity, and the full poll of every watched entity keeps its interval through a stream of changes", async () => {
  const log = new MemoryLog();
  const polls: string[][] = [];
  const counting: EventSource = {
    after: (entityId, afterSeq, limit) => log.after(entityId, afterSeq, limit),
    poll: (cursors, limit) => {
      polls.push([...cursors.keys()].sort());
      return log.poll(cursors, limit);
    },
  };
  const hub = new EventHub(counting, { pollIntervalMs: 200, keepaliveMs: 10_000, maxWatches: 100, maxWatchesPerCaller: 100 });
  const watches = ["a", "b", "c", "d"].map((id) => {
    const watch = hub.open(id, "alice");
    watch.start(0, 0);
    return watch;
  });
  // The first poll reads everything; then changes to "a" alone, every 20 ms for 0.6 s.
  const started = Date.now();
  while (Date.now() - started < 600) {
    log.append("a", 1);
    hub.recorded(["a"]);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const full = polls.filter((p) => p.length === 4).length;
  const prompted = polls.filter((p) => p.length === 1);
  assert.ok(prompted.length >= 10 && prompted.every((p) => p[0] === "a"), JSON.stringify(polls));
  // One full poll at the start and one per 200 ms, whatever the prompts (timers may run late, not early).
  assert.ok(full >= 2 && full <= 4, `${full} full polls in 0.6 s at an interval of 0.2 s: ${JSON.stringify(polls)}`);
  for (const w of watches) w.close();
  await hub.close(0);
});

test("a poll that never answers (a dead connection) is given up at pollTimeoutMs and read again: watches still get other replicas' events", async () => {
  class StallingLog extends MemoryLog {
    stalls = 1;
    override async poll(cursors: ReadonlyMap<string, number>, limit: number, signal?: AbortSignal): Promise<EventRecord[]> {
      if (this.stalls-- > 0) return new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason)));
      return super.poll(cursors, limit);
    }
  }
  const log = new StallingLog();
  log.append("e", 1);
  const errors: unknown[] = [];
  const hub = new EventHub(log, { pollIntervalMs: 50, pollTimeoutMs: 200, keepaliveMs: 10_000, maxWatches: 10, maxWatchesPerCaller: 10, onPollError: (error) => errors.push(error) });
  const watch = hub.open("e", "alice");
  watch.start(1, 1);
  // Written on another replica: only a poll brings it.
  log.append("e", 1);
  const next = await within(watch.next(never), 3_000);
  assert.not.equal(next, "waited", "the stalled poll held the watch");
  assert.equal((next as EventRecord[]).map((e) => e.seq), [2]);
  assert.is(errors.length, 1, "the given-up poll is reported once");
  watch.close();
  await hub.close(0);
});

test("a watch resumed behind events its start read as existing gets them at once, though the hub's cursor (set by an earlier watch) waits for the next poll", async () => {
  const log = new MemoryLog();
  log.append("e", 1);
  const hub = hubOver(log);
  const live = hub.open("e", "alice");
  live.start(1, 1);
  // Written on another replica; the next poll is 10 s away.
  log.append("e", 2);
  const resumed = hub.open("e", "bob");
  resumed.start(1, 3);
  const next = await within(resumed.next(never), 1_000);
  assert.not.equal(next, "waited", "it waited for the poller");
  assert.equal((next as EventRecord[]).map((e) => e.seq), [2, 3]);
  for (const w of [live, resumed]) w.close();
  await hub.close(0);
});

test("a watch's own read that never answers ends it DATABASE_UNAVAILABLE at pollTimeoutMs, which clients resume from", async () => {
  class StallingReads extends MemoryLog {
    override async after(_entityId: string, _afterSeq: number, _limit: number, signal?: AbortSignal): Promise<EventRecord[]> {
      return new Promise((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason)));
    }
  }
  const log = new StallingReads();
  log.append("e", 3);
  const hub = new EventHub(log, { pollIntervalMs: 10_000, pollTimeoutMs: 200, keepaliveMs: 10_000, maxWatches: 10, maxWatchesPerCaller: 10 });
  const watch = hub.open("e", "alice");
  watch.start(1, 3);
  const ended = await within(rejection(watch.next(never)), 3_000);
  assert.not.equal(ended, "waited", "the watch waited on its read");
  assert.is((ended as { reason: string | undefined }).reason, "DATABASE_UNAVAILABLE");
  watch.close();
  await hub.close(0);
});

test("an ended watch whose stream stopped taking what it was given (its client not reading) gives its place back, also when it was inside a read when ended; one that reads on ends with the end's error", async () => {
  const log = new MemoryLog();
  log.append("e", 5);
  // Its replay read takes half a second: the end comes while it runs.
  const slow = Object.assign(Object.create(log) as MemoryLog, {
    after: async (entityId: string, afterSeq: number, limit: number) => {
      await new Promise((resolve) => setTimeout(resolve, 500));
      return log.after(entityId, afterSeq, limit);
    },
  });
  const hub = hubOver(slow);
  const stalled = hub.open("e", "alice");
  stalled.start(0, 5);
  const reader = hub.open("e", "bob");
  reader.start(5, 5);
  const readerEnd = rejection(reader.next(never));
  // The stalled stream takes its batch and never asks again, as a generator paused at a write.
  const batch = stalled.next(never);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const started = Date.now();
  const closing = hub.close(8_000);
  assert.is((await batch).length, 5);
  assert.is((await readerEnd).reason, "SHUTTING_DOWN", "a watch that reads on is told");
  reader.close();
  await closing;
  const ms = Date.now() - started;
  assert.ok(ms < 4_000, `the shutdown waited ${ms} ms for the unread watch`);
  assert.is(hub.size, 0);
  assert.is((await rejection(stalled.next(never))).reason, "SHUTTING_DOWN", "were it to read again, it is told too");
  stalled.close();
  assert.is(hub.size, 0, "given back once only");
});

test.run();

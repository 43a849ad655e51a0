import { test } from "uvu";
import * as assert from "uvu/assert";
import { confirmGrouper } from "../../src/store/confirm-grouper.js";

interface Input {
  readonly entityId: string;
  /** What `together` answers for it: recorded, left for alone, or the whole group fails. */
  readonly inGroup?: "recorded" | "left" | "fail" | "down" | "timeout";
  readonly groupable?: boolean;
  /** alone() fails for it. */
  readonly aloneFails?: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A stand-in store: `together` records what it is given when the test lets
 * that group end (`gated`: each group waits for its release), else at
 * once; every call is logged, and each answer says which path recorded it.
 */
function fakeStore(options: { gated?: boolean; maxGroup?: number; maxWaitMs?: number } = {}) {
  const log: string[] = [];
  const groups: string[][] = [];
  const sizes: Array<[number, number]> = [];
  // Each gated group: a promise the test awaits until the group started, and the group's release.
  const started: Array<(release: () => void) => void> = [];
  const pendingStarts: Array<() => void> = [];
  const nextGroup = () =>
    new Promise<() => void>((resolve) => {
      const release = pendingStarts.shift();
      if (release !== undefined) resolve(release);
      else started.push(resolve);
    });
  const confirm = confirmGrouper<Input, string>({
    alone: async (input) => {
      log.push(`alone ${input.entityId}`);
      await sleep(1);
      if (input.aloneFails === true) throw new Error(`alone failed: ${input.entityId}`);
      return `alone:${input.entityId}`;
    },
    released: async (input) => {
      log.push(`released ${input.entityId}`);
      await sleep(1);
      return `released:${input.entityId}`;
    },
    together: async (inputs) => {
      groups.push(inputs.map((i) => i.entityId));
      log.push(`together ${inputs.map((i) => i.entityId).join(",")}`);
      if (options.gated === true) {
        await new Promise<void>((release) => {
          const waiter = started.shift();
          if (waiter !== undefined) waiter(release);
          else pendingStarts.push(release);
        });
      } else await sleep(1);
      log.push(`ended ${inputs.map((i) => i.entityId).join(",")}`);
      if (inputs.some((i) => i.inGroup === "fail")) throw new Error("group failed");
      if (inputs.some((i) => i.inGroup === "timeout")) throw Object.assign(new Error("max_statement_time exceeded"), { code: "ER_STATEMENT_TIMEOUT", errno: 1969 });
      if (inputs.some((i) => i.inGroup === "down")) throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
      return inputs.map((i) => (i.inGroup === "left" ? undefined : `group:${i.entityId}`));
    },
    groupable: (input) => input.groupable !== false,
    maxGroup: options.maxGroup ?? 16,
    maxWaitMs: options.maxWaitMs ?? 1000,
    onGroup: (size, recorded) => sizes.push([size, recorded]),
  });
  return { confirm, log, groups, sizes, nextGroup };
}

const settle = (p: Promise<string>) => p.then((v) => v, (e: unknown) => `error:${(e as Error).message}`);

test("a lone confirm goes alone, on the same turn", async () => {
  const s = fakeStore();
  assert.is(await s.confirm({ entityId: "a" }), "alone:a");
  assert.equal(s.log, ["alone a"]);
  assert.equal(s.sizes, []);
});

test("confirms on different entities arriving together go as one group; each gets its own answer", async () => {
  const s = fakeStore();
  const answers = await Promise.all(["a", "b", "c"].map((entityId) => s.confirm({ entityId })));
  assert.equal(answers, ["group:a", "group:b", "group:c"]);
  assert.equal(s.groups, [["a", "b", "c"]]);
  assert.equal(s.sizes, [[3, 3]]);
});

test("a second confirm on an entity of the group waits for the group, then goes alone; one that may not be grouped goes alone at once", async () => {
  const s = fakeStore();
  const answers = await Promise.all([s.confirm({ entityId: "a" }), s.confirm({ entityId: "b" }), s.confirm({ entityId: "a" }), s.confirm({ entityId: "c", groupable: false })]);
  assert.equal(answers, ["group:a", "group:b", "released:a", "alone:c"]);
  assert.equal(s.groups, [["a", "b"]]);
  assert.equal(s.log, ["alone c", "together a,b", "ended a,b", "released a"]);
});

test("a confirm on an entity whose group is in flight is held until that group answered, even when others go on", async () => {
  const s = fakeStore({ gated: true, maxWaitMs: 5 });
  const first = Promise.all([s.confirm({ entityId: "a" }), s.confirm({ entityId: "b" })]);
  const release = await s.nextGroup();
  const heldA = s.confirm({ entityId: "a" });
  // c goes after the 5 ms limit, while the group is still in flight.
  assert.is(await s.confirm({ entityId: "c" }), "alone:c");
  assert.equal(s.log, ["together a,b", "alone c"], "a is held while its group is in flight");
  release();
  assert.equal(await first, ["group:a", "group:b"]);
  assert.is(await heldA, "released:a");
  assert.equal(s.log, ["together a,b", "alone c", "ended a,b", "released a"]);
});

test("many confirms on one entity: the first goes, the rest are released together when it is answered", async () => {
  const s = fakeStore();
  const answers = await Promise.all(Array.from({ length: 5 }, () => s.confirm({ entityId: "hot" })));
  assert.equal(answers, ["alone:hot", ...Array(4).fill("released:hot")]);
  assert.equal(s.log, ["alone hot", ...Array(4).fill("released hot")]);
  assert.equal(s.groups, []);
});

test("what the group leaves is decided alone, after the group ended", async () => {
  const s = fakeStore();
  const answers = await Promise.all([s.confirm({ entityId: "a" }), s.confirm({ entityId: "b", inGroup: "left" })]);
  assert.equal(answers, ["group:a", "alone:b"]);
  assert.equal(s.log, ["together a,b", "ended a,b", "alone b"]);
  assert.equal(s.sizes, [[2, 1]]);
});

test("a group that fails is decided confirm by confirm; one that fails alone is only its own failure", async () => {
  const s = fakeStore();
  const answers = await Promise.all([
    settle(s.confirm({ entityId: "a", inGroup: "fail" })),
    settle(s.confirm({ entityId: "b" })),
    settle(s.confirm({ entityId: "c", aloneFails: true })),
  ]);
  assert.equal(answers, ["alone:a", "alone:b", "error:alone failed: c"]);
  assert.equal(s.sizes, [[3, 0]]);
});

test("a group that ran out of time is decided confirm by confirm: the lock it waited on may be one confirm's", async () => {
  const s = fakeStore();
  const answers = await Promise.all([settle(s.confirm({ entityId: "a", inGroup: "timeout" })), settle(s.confirm({ entityId: "b" }))]);
  assert.equal(answers, ["alone:a", "alone:b"]);
});

test("after groups that failed or left confirms, the next lone confirm goes at once (nothing is left counted in flight)", async () => {
  const s = fakeStore({ maxWaitMs: 60_000 });
  await Promise.all([settle(s.confirm({ entityId: "a", inGroup: "fail" })), settle(s.confirm({ entityId: "b" }))]);
  await Promise.all([s.confirm({ entityId: "c", inGroup: "left" }), s.confirm({ entityId: "d" })]);
  await Promise.all([settle(s.confirm({ entityId: "e", inGroup: "down" })), settle(s.confirm({ entityId: "f" }))]);
  await settle(s.confirm({ entityId: "g", aloneFails: true }));
  // With a transaction wrongly counted in flight this would wait out the 60 s limit.
  const next = await Promise.race([s.confirm({ entityId: "h" }), sleep(2_000).then(() => "still waiting")]);
  assert.is(next, "alone:h");
});

test("an unreachable database fails the whole group at once, without retrying each alone", async () => {
  const s = fakeStore();
  const answers = await Promise.all([settle(s.confirm({ entityId: "a", inGroup: "down" })), settle(s.confirm({ entityId: "b" }))]);
  assert.equal(answers, ["error:connect ECONNREFUSED", "error:connect ECONNREFUSED"]);
  assert.equal(s.log, ["together a,b", "ended a,b"]);
});

test("groups hold at most maxGroup confirms, split evenly", async () => {
  const s = fakeStore({ maxGroup: 4 });
  const answers = await Promise.all(Array.from({ length: 9 }, (_, i) => s.confirm({ entityId: `e${i}` })));
  assert.equal(answers, Array.from({ length: 9 }, (_, i) => `group:e${i}`));
  assert.equal(s.groups.map((g) => g.length), [3, 3, 3]);
});

test("confirms arriving while a group is in flight wait for it to end, then go together", async () => {
  const s = fakeStore({ gated: true });
  const first = Promise.all([s.confirm({ entityId: "a" }), s.confirm({ entityId: "b" })]);
  const releaseFirst = await s.nextGroup();
  const later = [s.confirm({ entityId: "c" })];
  await new Promise((resolve) => setImmediate(resolve));
  later.push(s.confirm({ entityId: "d" }));
  assert.equal(s.groups, [["a", "b"]], "nothing else goes while the group is in flight");
  releaseFirst();
  assert.equal(await first, ["group:a", "group:b"]);
  (await s.nextGroup())();
  assert.equal(await Promise.all(later), ["group:c", "group:d"]);
  assert.equal(s.groups, [["a", "b"], ["c", "d"]]);
});

test("a confirm waits at most maxWaitMs for the transactions in flight, then goes anyway", async () => {
  const s = fakeStore({ gated: true, maxWaitMs: 10 });
  const first = Promise.all([s.confirm({ entityId: "a" }), s.confirm({ entityId: "b" })]);
  const release = await s.nextGroup();
  // The group is never released before the late confirm is answered.
  assert.is(await s.confirm({ entityId: "c" }), "alone:c");
  release();
  assert.equal(await first, ["group:a", "group:b"]);
});

test.run();

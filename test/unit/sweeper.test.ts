// The orphan sweeper's loop: a blob the store refuses to delete does not
// stop the sweep of the blobs listed after it, and what a sweep did is
// reported also when it fails. (Its work against the real database and
// Azurite is the sweeper contract suite's.)
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BlobListing, BlobStore } from "../../src/blob/blob-store.js";
import type { BlobDeleter } from "../../src/jobs/blob-deleter.js";
import { OrphanSweeper, type SweepResult } from "../../src/jobs/sweeper.js";
import { scopedKey, type ScopedId, type UploadStore } from "../../src/store/upload-store.js";

const old = new Date("2026-01-01T00:00:00Z");
const now = new Date("2026-06-01T00:00:00Z");
const id = (n: number) => `00000000-0000-4000-8000-00000000000${n}`;

function sweeperOver(names: string[], refuse: Set<string>, listFailsAfter?: number, goneAlready = new Set<string>(), deleteUnrecordedPackages?: boolean) {
  const deleted: string[] = [];
  const warned: string[] = [];
  const reports: Array<{ result: SweepResult; error: unknown }> = [];
  const blobs = {
    async *list(prefix: string): AsyncIterable<BlobListing> {
      let n = 0;
      for (const name of names.filter((name) => name.startsWith(prefix))) {
        if (listFailsAfter !== undefined && n++ === listFailsAfter) throw new Error("listing failed");
        yield { name, lastModified: old };
      }
    },
    async deleteIfExists(path: string) {
      if (refuse.has(path)) throw new Error(`the store refused ${path}`);
      if (goneAlready.has(path)) return false;
      deleted.push(path);
      return true;
    },
  } as unknown as BlobStore;
  const uploads = {
    abandonIssuedBefore: async () => 0,
    states: async () => new Map(),
    versionsExisting: async () => new Set(),
  } as unknown as UploadStore;
  const deleter = { runOnce: async () => 0 } as unknown as BlobDeleter;
  const log = { warn: (_: object, msg: string) => warned.push(msg), error: () => undefined };
  const sweeper = new OrphanSweeper(uploads, blobs, deleter, { now: () => now } as never, log, {
    graceMs: 60_000,
    intervalMs: 3_600_000,
    deleteUnrecordedPackages,
    onSweep: (result, error) => reports.push({ result, error }),
  });
  return { sweeper, deleted, warned, reports };
}

test("a stray blob the store will not delete is logged and passed over; the blobs after it are swept", async () => {
  const names = [1, 2, 3].map((n) => `uploads/e/${id(n)}/package`);
  const { sweeper, deleted, warned, reports } = sweeperOver(names, new Set([names[0]!]));
  const result = await sweeper.runOnce();
  assert.equal(deleted, names.slice(1));
  assert.is(result.strayBlobs, 2);
  assert.is(warned.length, 1);
  assert.equal(reports, [{ result, error: undefined }]);
});

test("a sweep that fails part-way reports what it did, with the error", async () => {
  const names = [1, 2, 3].map((n) => `uploads/e/${id(n)}/package`);
  const { sweeper, deleted, reports } = sweeperOver(names, new Set(), 2);
  const error = await sweeper.runOnce().then(() => undefined, (e: unknown) => e);
  assert.is((error as Error).message, "listing failed");
  assert.equal(deleted, names.slice(0, 2));
  assert.is(reports.length, 1);
  assert.is(reports[0]!.result.strayBlobs, 2);
  assert.is(reports[0]!.error, error);
});

test("a listed stray blob someone else deleted before the sweeper's delete is not counted", async () => {
  const names = [1, 2, 3].map((n) => `uploads/e/${id(n)}/package`);
  const { sweeper, deleted } = sweeperOver(names, new Set(), undefined, new Set([names[1]!]));
  const result = await sweeper.runOnce();
  assert.equal(deleted, [names[0], names[2]]);
  assert.is(result.strayBlobs, 2);
});

test("SWEEP_UNRECORDED_PACKAGES=off with more kept packages than the log names: the rest are counted in the log every sweep, not kept unsaid", async () => {
  const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString().padStart(12, "0")}`;
  const names = Array.from({ length: 10_002 }, (_, n) => `versions/e/${uuid(n)}/package`);
  const { sweeper, deleted, warned } = sweeperOver(names, new Set(), undefined, undefined, false);
  for (let sweep = 1; sweep <= 2; sweep++) {
    const result = await sweeper.runOnce();
    assert.is(result.keptPackages, 10_002);
    assert.equal(deleted, []);
    const summaries = warned.filter((msg) => msg.includes("beyond the first 10000"));
    assert.is(summaries.length, sweep, "said again by every sweep");
    assert.match(summaries[0]!, "kept 2 packages no version records beyond the first 10000 the log names");
  }
  assert.is(warned.filter((msg) => msg.startsWith("kept a package no version records")).length, 10_000, "each of the first named once");
});

/**
 * An upload store that answers any method (the lookups by batch, or any
 * other), counting the calls: versions `existing` exist, no upload has a
 * record. `onCall` runs at each call, with the method's name.
 */
function countingUploads(existing: ReadonlySet<string>, onCall: (name: string) => void = () => undefined) {
  const calls: string[] = [];
  const answer = (name: string, args: unknown[]): unknown => {
    if (name === "abandonIssuedBefore") return 0;
    if (name === "states") return new Map();
    if (name === "versionsExisting") return new Set((args[0] as ScopedId[]).filter((v) => existing.has(v.id)).map((v) => scopedKey(v.entityId, v.id)));
    // Whatever else a sweep may ask, one blob at a time.
    if (name.toLowerCase().includes("version")) return existing.has(String(args[1]));
    return undefined;
  };
  const uploads = new Proxy({}, { get: (_, name) => async (...args: unknown[]) => (calls.push(String(name)), onCall(String(name)), answer(String(name), args)) });
  return { uploads: uploads as UploadStore, calls };
}

function sweeperWith(uploads: UploadStore, names: string[]) {
  const deleted: string[] = [];
  const blobs = {
    async *list(prefix: string): AsyncIterable<BlobListing> {
      for (const name of names.filter((name) => name.startsWith(prefix))) yield { name, lastModified: old };
    },
    async deleteIfExists(path: string) {
      deleted.push(path);
      return true;
    },
  } as unknown as BlobStore;
  const deleter = { runOnce: async () => 0 } as unknown as BlobDeleter;
  const log = { warn: () => undefined, error: () => undefined };
  const sweeper = new OrphanSweeper(uploads, blobs, deleter, { now: () => now } as never, log, { graceMs: 60_000, intervalMs: 3_600_000 });
  return { sweeper, deleted };
}

const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString().padStart(12, "0")}`;
/** Each version's package and lockfile under versions/, over 7 entities. */
const versionBlobs = (count: number) => Array.from({ length: count }, (_, n) => [`versions/e${n % 7}/${uuid(n)}/package`, `versions/e${n % 7}/${uuid(n)}/package-lock.json`]).flat();

test("a sweep asks the database about its listed blobs a batch at a time, not blob by blob", async () => {
  const versions = 1_200;
  // Every third version has no record: its package and lockfile are strays.
  const existing = new Set(Array.from({ length: versions }, (_, n) => uuid(n)).filter((_, n) => n % 3 !== 0));
  const { uploads, calls } = countingUploads(existing);
  const names = versionBlobs(versions);
  const { sweeper, deleted } = sweeperWith(uploads, names);
  const result = await sweeper.runOnce();
  assert.equal(deleted, names.filter((_, i) => Math.floor(i / 2) % 3 === 0));
  assert.is(result.strayBlobs, 800);
  const lookups = calls.filter((name) => name !== "abandonIssuedBefore").length;
  // 2,400 blobs: 5 batches of up to 500, each an upload and a version lookup.
  assert.ok(lookups <= 10, `${lookups} store calls for ${versions} versions`);
});

test("stop() during a sweep's lookup of a batch ends the sweep there: nothing of it deleted, no next batch looked up", async () => {
  let sweeper: OrphanSweeper | undefined;
  let stopped: Promise<void> | undefined;
  const { uploads, calls } = countingUploads(new Set(), (name) => {
    if (name === "states") stopped ??= sweeper!.stop();
  });
  const made = sweeperWith(uploads, versionBlobs(1_000));
  sweeper = made.sweeper;
  const result = await sweeper.runOnce();
  await stopped;
  assert.is(calls.filter((name) => name === "states").length, 1, calls.join());
  assert.equal(made.deleted, []);
  assert.is(result.strayBlobs, 0);
});

test.run();

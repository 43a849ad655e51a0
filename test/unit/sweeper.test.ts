// The orphan sweeper's loop: a blob the store refuses to delete does not
// stop the sweep of the blobs listed after it, and what a sweep did is
// reported also when it fails. (Its work against the real database and
// Azurite is the sweeper contract suite's.)
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BlobListing, BlobStore } from "../../src/blob/blob-store.js";
import type { BlobDeleter } from "../../src/jobs/blob-deleter.js";
import { OrphanSweeper, type SweepResult } from "../../src/jobs/sweeper.js";
import type { UploadStore } from "../../src/store/upload-store.js";

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
    state: async () => undefined,
    versionExists: async () => false,
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

test.run();

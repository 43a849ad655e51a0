// The blob deleter's loop against stores that fail: what it logs, and
// what it starts once it is stopping. (Its work against the real database
// and Azurite is the sweeper and delete contract suites'.)
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { BlobStore } from "../../src/blob/blob-store.js";
import { BlobDeleter } from "../../src/jobs/blob-deleter.js";
import type { DueDeletion, UploadStore } from "../../src/store/upload-store.js";

const id = (n: number) => `00000000-0000-4000-8000-00000000000${n}`;

function deleterOver(due: DueDeletion[], storeDown: boolean) {
  const warned: Array<{ obj: object; msg: string }> = [];
  const deleteCalls: string[] = [];
  const retried: string[] = [];
  const blobs = {
    async deleteIfExists(path: string) {
      deleteCalls.push(path);
      if (storeDown) throw new Error("connect ECONNREFUSED 127.0.0.1:10000");
      return true;
    },
  } as unknown as BlobStore;
  const uploads = {
    dueDeletions: async () => due,
    claim: async () => true,
    finish: async () => undefined,
    retryAt: async (_: string, uploadId: string) => void retried.push(uploadId),
  } as unknown as UploadStore;
  const log = { warn: (obj: object, msg: string) => void warned.push({ obj, msg }), error: () => undefined };
  const deleter = new BlobDeleter(uploads, blobs, { now: () => new Date("2026-06-01T00:00:00Z") } as never, log);
  return { deleter, warned, deleteCalls, retried };
}

test("a pass with the blob store down logs its first failure and a count of the rest, not a line per row; each row is still retried", async () => {
  const due = [1, 2, 3, 4, 5].map((n) => ({ id: id(n), entityId: "e", versionId: undefined, attempts: 0 }));
  const { deleter, warned, retried } = deleterOver(due, true);
  assert.is(await deleter.runOnce(), 0);
  assert.equal(retried, due.map((d) => d.id));
  assert.is(warned.length, 2, warned.map((w) => w.msg).join("\n"));
  assert.is(warned[0]!.msg, "blob deletion failed; retrying later");
  assert.match(warned[1]!.msg, /^5 blob deletions failed in this pass/);
  assert.match(String((warned[1]!.obj as { lastError: string }).lastError), /ECONNREFUSED/);
});

test("a pass with one failure logs that one line only", async () => {
  const { deleter, warned } = deleterOver([{ id: id(1), entityId: "e", versionId: undefined, attempts: 2 }], true);
  await deleter.runOnce();
  assert.equal(warned.map((w) => w.msg), ["blob deletion failed; retrying later"]);
});

test("once stopping, deleteSoon starts nothing: the row waits for the next pass rather than run against a closed database", async () => {
  const { deleter, deleteCalls } = deleterOver([], false);
  await deleter.stop();
  deleter.deleteSoon("e", id(1));
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(deleteCalls, []);
});

test("before stop, deleteSoon deletes at once", async () => {
  const { deleter, deleteCalls } = deleterOver([], false);
  deleter.deleteSoon("e", id(1));
  await deleter.stop();
  assert.ok(deleteCalls.length > 0);
});

test.run();

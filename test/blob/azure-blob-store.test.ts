// The Azure blob store against the real emulator (Azurite): the check,
// the write-once copy into the final area, and deletes.
import { randomBytes } from "node:crypto";
import { createHash } from "node:crypto";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { sharedAzurite } from "../support/env.js";

const minute = 60_000;

async function storeWithBlob(path: string, content: string) {
  const azurite = await sharedAzurite();
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container: `blob-${randomBytes(4).toString("hex")}` });
  await store.ensureContainer();
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  assert.is((await fetch(url, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: content })).status, 201);
  return store;
}

test("stat reads a blob's size, fingerprint and ETag; a missing blob is undefined", async () => {
  const store = await storeWithBlob("uploads/e1/u1/package", "twelve bytes");
  const stat = await store.stat("uploads/e1/u1/package");
  assert.is(stat?.size, 12);
  assert.is(stat?.md5, createHash("md5").update("twelve bytes").digest("base64"));
  assert.ok((stat?.etag ?? "") !== "");
  assert.is(await store.stat("uploads/e1/u1/missing"), undefined);
});

test("copyOnce copies the blob as it was checked, writes its destination once, and says why when it does not", async () => {
  const store = await storeWithBlob("uploads/e2/u2/package", "first");
  const checked = (await store.stat("uploads/e2/u2/package"))!;
  assert.is(await store.copyOnce("uploads/e2/u2/package", "versions/e2/u2/package", checked.etag), "copied");
  assert.is((await store.stat("versions/e2/u2/package"))?.md5, checked.md5);
  assert.is(await store.copyOnce("uploads/e2/u2/package", "versions/e2/u2/package", checked.etag), "exists", "a final blob is written once");
  assert.is(await store.copyOnce("uploads/e2/u2/package", "versions/e2/u3/package", '"0x0BADE7A9"'), "source-changed");
  assert.is(await store.copyOnce("uploads/e2/none/package", "versions/e2/u4/package", undefined), "source-missing");
  await store.deleteIfExists("uploads/e2/u2/package");
  await store.deleteIfExists("uploads/e2/u2/package");
  assert.is(await store.stat("uploads/e2/u2/package"), undefined);
});

test("a call the caller gave up on rejects with the caller's reason, not as the store being down", async () => {
  const store = await storeWithBlob("uploads/e3/u3/package", "x");
  const controller = new AbortController();
  const reason = new Error("the call's deadline");
  controller.abort(reason);
  const error = await store.stat("uploads/e3/u3/package", controller.signal).then(() => undefined, (e: unknown) => e);
  assert.is(error, reason);
});

test.run();

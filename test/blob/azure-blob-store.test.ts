// The Azure blob store against the real emulator (Azurite): the blob check
// confirm makes, and the read SAS it signs once and renews.
import { randomBytes } from "node:crypto";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { sharedAzurite } from "../support/env.js";

const minute = 60_000;

test("stat reads a blob's size; a missing blob is undefined", async () => {
  const azurite = await sharedAzurite();
  const container = `stat-${randomBytes(4).toString("hex")}`;
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container });
  await store.ensureContainer();
  const path = "e1/u1/package";
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  const put = await fetch(url, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: "twelve bytes" });
  assert.is(put.status, 201);
  assert.is((await store.stat(path))?.size, 12);
  assert.is(await store.stat("e1/u1/missing"), undefined);
});

/** A store on a fresh container with its own clock, and one blob of `content` in it. */
async function storeWithBlob(now: () => number, content: string) {
  const azurite = await sharedAzurite();
  const container = `sas-${randomBytes(4).toString("hex")}`;
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container, now, timeoutMs: 2_000 });
  await store.ensureContainer();
  const path = "e2/u2/package";
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  assert.is((await fetch(url, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: content })).status, 201);
  return { store, path };
}

const refused = (p: Promise<unknown>) =>
  p.then(
    () => false,
    () => true,
  );

test("the reused read SAS, once refused, is signed anew (once) from the clock", async () => {
  // 30 minutes behind, the store signs read SASes that have expired (25 minutes).
  let now = Date.now() - 30 * minute;
  const { store, path } = await storeWithBlob(() => now, "x");
  assert.ok(await refused(store.stat(path)), "an expired read SAS is refused");
  // Eight minutes on, the cached SAS is still within its 10 minutes of use,
  // but refused: signed again, now with 3 minutes left, and the blob is found.
  now += 8 * minute;
  assert.is((await store.stat(path))?.size, 1);
});

test("a clock gone back makes the read SAS be signed again", async () => {
  let now = Date.now();
  const { store, path } = await storeWithBlob(() => now, "xy");
  assert.is((await store.stat(path))?.size, 2);
  // Back by 30 minutes: a SAS signed now has expired, so only a new one is refused.
  now -= 30 * minute;
  assert.ok(await refused(store.stat(path)), "signed again from the clock, not the cached one");
});

test.run();

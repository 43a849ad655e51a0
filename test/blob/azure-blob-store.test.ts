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

test("the blob checks' read SAS follows the clock: an expired one is signed again", async () => {
  const azurite = await sharedAzurite();
  const container = `sas-${randomBytes(4).toString("hex")}`;
  // The store's clock starts 30 minutes behind: its first read SAS (15
  // minutes) has already expired for the emulator.
  let now = Date.now() - 30 * minute;
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container, now: () => now, timeoutMs: 2_000 });
  await store.ensureContainer();
  const path = "e2/u2/package";
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  assert.is((await fetch(url, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: "x" })).status, 201);
  const refused = await store.stat(path).then(
    () => false,
    () => true,
  );
  assert.ok(refused, "an expired read SAS is refused");
  // On time again: signed anew, and the blob is found.
  now = Date.now();
  assert.is((await store.stat(path))?.size, 1);
});

test.run();

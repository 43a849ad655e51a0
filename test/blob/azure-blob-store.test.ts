// The Azure blob store against the real emulator (Azurite): the check,
// the write-once copy into the final area, and deletes.
import { randomBytes } from "node:crypto";
import { createHash } from "node:crypto";
import { BlobServiceClient } from "@azure/storage-blob";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { sharedAzurite } from "../support/env.js";

const minute = 60_000;

async function storeWithBlob(path: string, content: string, container = `blob-${randomBytes(4).toString("hex")}`) {
  const azurite = await sharedAzurite();
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container });
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
  assert.is(await store.deleteIfExists("uploads/e2/u2/package"), true, "deleted");
  assert.is(await store.deleteIfExists("uploads/e2/u2/package"), false, "nothing left to delete");
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

/** What a holder of an upload URL can do to its blob: Azure grants write with lease and snapshot. */
async function asUploader(store: AzureBlobStore, path: string, comp: "lease" | "snapshot"): Promise<number> {
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  url.searchParams.set("comp", comp);
  const headers: Record<string, string> = { "x-ms-version": "2021-12-02" };
  if (comp === "lease") Object.assign(headers, { "x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1" });
  return (await fetch(url, { method: "PUT", headers })).status;
}

test("deleteIfExists deletes a blob its uploader leased for good or snapshotted", async () => {
  const containerName = `blob-${randomBytes(4).toString("hex")}`;
  const store = await storeWithBlob("uploads/e4/u4/package", "leased", containerName);
  assert.is(await asUploader(store, "uploads/e4/u4/package", "lease"), 201);
  assert.is(await store.deleteIfExists("uploads/e4/u4/package"), true);
  assert.is(await store.stat("uploads/e4/u4/package"), undefined);

  const path = "uploads/e4/u5/package";
  const url = new URL(store.signUploadUrl(path, new Date(Date.now() + 5 * minute)));
  assert.is((await fetch(url, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: "snapped" })).status, 201);
  assert.is(await asUploader(store, path, "snapshot"), 201);
  assert.is(await asUploader(store, path, "lease"), 201);
  assert.is(await store.deleteIfExists(path), true);
  assert.is(await store.stat(path), undefined);
  const container = BlobServiceClient.fromConnectionString((await sharedAzurite()).connectionString).getContainerClient(containerName);
  const left: string[] = [];
  for await (const blob of container.listBlobsFlat({ prefix: "uploads/e4/", includeSnapshots: true })) left.push(`${blob.name}@${blob.snapshot ?? ""}`);
  assert.equal(left, [], "no snapshot left");
});

test("two starts reclaiming a container at once both get the owner recorded, not a failed claim", async () => {
  const azurite = await sharedAzurite();
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container: `claim-${randomBytes(4).toString("hex")}` });
  await store.ensureContainer();
  assert.is((await store.claimFor("old")).databaseId, "old");
  for (let round = 0; round < 5; round++) {
    // Two replicas of one database: each sees its own id.
    const same = await Promise.all([store.reclaimFor("new", "old"), store.reclaimFor("new", "old")]);
    assert.equal(
      same.map((owner) => owner.databaseId),
      ["new", "new"],
    );
    // Two databases: both see the one that won.
    const [a, b] = await Promise.all([store.reclaimFor("a", "new"), store.reclaimFor("b", "new")]);
    assert.is(a.databaseId, b.databaseId);
    assert.is((await store.recordedOwner())?.databaseId, a.databaseId);
    assert.is((await store.reclaimFor("old", a.databaseId)).databaseId, "old");
  }
});

test.run();

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { startEmbeddedAzurite } from "../../src/blob/embedded-azurite.js";
import { type Backend, createTestDatabase } from "../support/env.js";
import { newEntityId, push, serviceEnv, spawnService, startService } from "../support/service.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Faults the issue names for this stage: blob deletions that fail, and replicas starting together. */
export function faultsSuite(backend: Backend) {
  const s = suite(`${backend}: faults: failed blob deletions, concurrent start-up`);

  s("a blob deletion that fails leaves no record and is retried until the blob is gone", async () => {
    const location = fs.mkdtempSync(path.join(os.tmpdir(), "ev-azurite-"));
    let azurite = await startEmbeddedAzurite({ location });
    const port = Number(new URL(azurite.blobEndpoint).port);
    const svc = await startService(backend, {
      env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, BLOB_DELETION_INTERVAL_MS: "200", BLOB_TIMEOUT_MS: "2000" },
    });
    try {
      const e = newEntityId();
      const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
      const v2 = (await push(svc, e, { base: v1.id, lockfile: "{}" })).confirm!.body.version;
      await azurite.stop();
      const del = await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`);
      assert.is(del.status, 200);
      assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v2.id}`)).body.code, "VERSION_NOT_FOUND");
      assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 1);
      await sleep(500);
      azurite = await startEmbeddedAzurite({ location, port });
      const blobs = new AzureBlobStore({ connectionString: azurite.connectionString, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      await until("the deleted version's blobs to go", async () => (await blobs.stat(v2.storage_path)) === undefined && (await blobs.stat(v2.package_lock_path)) === undefined);
      assert.ok((await blobs.stat(v1.storage_path)) !== undefined, "the kept version's package must stay");
    } finally {
      await svc.close();
      await azurite.stop();
      fs.rmSync(location, { recursive: true, force: true });
    }
  });

  if (backend === "mysql") {
    s("two processes starting at once on an empty database both migrate and serve", async () => {
      const db = await createTestDatabase("mysql");
      const env = await serviceEnv(db);
      const [a, b] = await Promise.all([spawnService(env, db), spawnService(env, db)]);
      try {
        const e = newEntityId();
        const v = (await push(a, e)).confirm!.body.version;
        assert.is((await b.rest.get(`/api/entities/${e}/versions/${v.id}`)).status, 200);
      } finally {
        await Promise.all([a.close(), b.close()]);
        await db.drop();
      }
    });
  }

  return s;
}

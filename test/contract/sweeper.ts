import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { areaPrefixes, parseUploadPath } from "../../src/blob/blob-paths.js";
import type { App } from "../../src/app.js";
import type { Backend } from "../support/env.js";
import { blobStoreWith, memoryLogger, newEntityId, push, putBlob, serviceEnv, startService, uploadOnly, type TestService } from "../support/service.js";
import { suite } from "uvu";
import { randomUUID } from "node:crypto";
import { BlobServiceClient } from "@azure/storage-blob";
import { loadConfig } from "../../src/config.js";
import type { BlobDeleter } from "../../src/jobs/blob-deleter.js";
import { OrphanSweeper } from "../../src/jobs/sweeper.js";
import { openDatabase } from "../../src/store/database.js";
import { migrateLatest } from "../../src/store/migrate.js";
import { UploadStore } from "../../src/store/upload-store.js";
import { createTestDatabase } from "../support/env.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Every version record has its package blob; every blob older than the grace period has a version. */
export async function assertStorageConsistent(svc: TestService, entities: string[], graceMs: number): Promise<void> {
  const blobs = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
  const referenced = new Set<string>();
  for (const e of entities) {
    const list = await svc.restAs({ authorization: `Bearer ${await adminToken()}` }).get(`/api/entities/${e}/versions?page_size=1000`);
    for (const v of list.body.versions ?? []) {
      assert.ok((await blobs.stat(v.storage_path)) !== undefined, `version ${v.id} lost its package blob`);
      referenced.add(v.storage_path);
      if (v.package_lock_path !== undefined) referenced.add(v.package_lock_path);
    }
  }
  const cutoff = Date.now() - graceMs;
  for (const prefix of Object.values(areaPrefixes)) {
    for await (const blob of blobs.list(prefix)) {
      // Names of the service's making only: anything else there is not its own.
      const ours = parseUploadPath(blob.name);
      if (ours === undefined || ours.area === "legacy") continue;
      if (blob.lastModified.getTime() < cutoff) assert.ok(referenced.has(blob.name), `blob ${blob.name} is older than the grace period and unreferenced`);
    }
  }
}

async function adminToken() {
  const { token } = await import("../support/tokens.js");
  return token({ sub: "root", roles: ["admin"] });
}

/** The orphan sweeper: reconciles the container against the records. */
export function sweeperSuite(backend: Backend) {
  const s = suite(`${backend}: sweeper: orphan uploads and stray blobs`);

  s("sweeps unconfirmed uploads and stray blobs past the grace period, and nothing a version uses", async () => {
    const { logger, text } = memoryLogger();
    const svc = await startService(backend, { logger, env: { ORPHAN_GRACE_SECONDS: "2", SWEEP_INTERVAL_SECONDS: "3600" } });
    const app = (svc as TestService & { app: App }).app;
    try {
      const blobs = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      const e = newEntityId();
      const kept = (await push(svc, e, { lockfile: "{}" })).confirm!.body.version;
      const orphan = await uploadOnly(svc, e, { base: kept.id, lockfile: "{}" });
      const neverUploaded = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: "2030.01.01-000000", source_hash: "d".repeat(64), base_version_id: kept.id });
      // Stray blobs: in each of the service's areas one with no upload
      // record; and three it must leave alone: another application's blob,
      // a name of the layout before staging, one under a prefix of ours
      // that is not a name we make.
      const sas = (await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: "2030.01.01-000001", source_hash: "e".repeat(64), base_version_id: kept.id })).body;
      const strayUrl = sas.upload_url.replace(/[0-9a-f-]{36}\/package\?/, "00000000-0000-4000-8000-000000000000/package?");
      assert.is(await putBlob(strayUrl, "x", sas.upload_headers), 403, "a SAS cannot write elsewhere, so strays come from outside");
      const { BlobServiceClient } = await import("@azure/storage-blob");
      const container = BlobServiceClient.fromConnectionString(svc.env["AZURE_STORAGE_CONNECTION_STRING"]!).getContainerClient(svc.env["AZURE_STORAGE_CONTAINER"]!);
      const nobody = "00000000-0000-4000-8000-000000000000";
      await container.getBlockBlobClient(`uploads/${e}/${nobody}/package`).upload("stray", 5);
      await container.getBlockBlobClient(`versions/${e}/${nobody}/package`).upload("stray", 5);
      const foreign = [`${e}/${nobody}/package`, "not-ours/readme.txt", "uploads/readme.txt"];
      for (const name of foreign) await container.getBlockBlobClient(name).upload("foreign", 7);

      await sleep(2_500);
      const fresh = await uploadOnly(svc, e, { base: kept.id });
      const result = await app.sweeper.runOnce();
      assert.is(result.abandonedUploads, 3, "the orphan, the never-uploaded and the SAS-only upload");
      assert.is(result.strayBlobs, 2);
      // A package no version records is said by name (a restored database's sweep deletes them); a staged upload's blob is not.
      const warned = text().split("\n").filter((line) => line.includes("deleted a package no version records"));
      assert.is(warned.length, 1, text());
      assert.match(warned[0]!, `"path":"versions/${e}/${nobody}/package"`);
      for (const name of foreign) assert.ok((await blobs.stat(name)) !== undefined, `${name} is not the service's to delete`);
      assert.is(await blobs.stat(orphan.res.body.storage_path), undefined);
      assert.is(await blobs.stat(orphan.res.body.package_lock_path), undefined);
      assert.ok((await blobs.stat(kept.storage_path)) !== undefined, "a version's package is never swept");
      assert.ok((await blobs.stat(kept.package_lock_path)) !== undefined, "a version's lockfile is never swept");
      assert.ok((await blobs.stat(fresh.res.body.storage_path)) !== undefined, "an upload inside the grace period stays");
      const late = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: orphan.res.body.storage_path,
        version: orphan.version,
        source_hash: orphan.sourceHash,
        file_size_bytes: Buffer.byteLength(orphan.content),
        base_version_id: kept.id,
      });
      assert.is(late.body.code, "UPLOAD_NOT_FOUND", "a swept upload cannot be confirmed");
      assert.is(neverUploaded.status, 200);
      await assertStorageConsistent(svc, [e], 2_000 + 500);
    } finally {
      await svc.close();
    }
  });

  s("SWEEP_UNRECORDED_PACKAGES=off keeps a package no version records, naming it once, and still sweeps uploads", async () => {
    const { logger, text } = memoryLogger();
    const svc = await startService(backend, { logger, env: { ORPHAN_GRACE_SECONDS: "1", SWEEP_INTERVAL_SECONDS: "3600", SWEEP_UNRECORDED_PACKAGES: "off" } });
    const app = (svc as TestService & { app: App }).app;
    try {
      const { BlobServiceClient } = await import("@azure/storage-blob");
      const container = BlobServiceClient.fromConnectionString(svc.env["AZURE_STORAGE_CONNECTION_STRING"]!).getContainerClient(svc.env["AZURE_STORAGE_CONTAINER"]!);
      const e = newEntityId();
      // What a database restored from an older backup does not know: a version's package with no version.
      const unrecorded = `versions/${e}/00000000-0000-4000-8000-000000000003/package`;
      const staged = `uploads/${e}/00000000-0000-4000-8000-000000000004/package`;
      for (const name of [unrecorded, staged]) await container.getBlockBlobClient(name).upload("stray", 5);
      const abandoned = await uploadOnly(svc, e);
      await sleep(1_500);
      const first = await app.sweeper.runOnce();
      const second = await app.sweeper.runOnce();
      assert.is(await container.getBlockBlobClient(unrecorded).exists(), true, "the package is kept");
      assert.is(first.keptPackages, 1);
      assert.is(second.keptPackages, 1, "kept again by every sweep");
      assert.is(first.strayBlobs, 1, "the upload with no record is swept all the same");
      assert.is(await container.getBlockBlobClient(staged).exists(), false);
      assert.is(first.abandonedUploads, 1);
      assert.is(await container.getBlockBlobClient(abandoned.res.body.storage_path).exists(), false, "an abandoned upload is deleted");
      const named = text().split("\n").filter((line) => line.includes("kept a package no version records"));
      assert.is(named.length, 1, "named once per process, not once per sweep");
      assert.match(named[0]!, `"path":"${unrecorded}"`);
      assert.not.match(text(), "deleted a package no version records");
    } finally {
      await svc.close();
    }
  });

  s("confirms racing the sweeper: each upload ends either confirmed with its blob or swept, never both", async () => {
    const svc = await startService(backend, { env: { ORPHAN_GRACE_SECONDS: "1", SWEEP_INTERVAL_SECONDS: "3600" } });
    const app = (svc as TestService & { app: App }).app;
    try {
      const entities = Array.from({ length: 12 }, () => newEntityId());
      const prepared = await Promise.all(entities.map((e) => uploadOnly(svc, e)));
      await sleep(1_500);
      const [, ...confirms] = await Promise.all([
        app.sweeper.runOnce(),
        ...prepared.map((p, i) =>
          svc.rest.post(`/api/entities/${entities[i]}/versions/confirm`, {
            storage_path: p.res.body.storage_path,
            version: p.version,
            source_hash: p.sourceHash,
            file_size_bytes: Buffer.byteLength(p.content),
          }),
        ),
      ]);
      await app.sweeper.runOnce();
      for (const c of confirms) assert.ok(c.status === 201 || c.body.code === "UPLOAD_NOT_FOUND", JSON.stringify(c.body));
      await assertStorageConsistent(svc, entities, 1_000 + 500);
    } finally {
      await svc.close();
    }
  });

  s("blobs their uploaders leased for good or snapshotted are swept and deleted all the same", async () => {
    const svc = await startService(backend, { env: { ORPHAN_GRACE_SECONDS: "1", SWEEP_INTERVAL_SECONDS: "3600" } });
    const app = (svc as TestService & { app: App }).app;
    try {
      const blobs = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      // What anyone holding an upload URL may do: Azure grants write with lease and snapshot.
      const asUploader = async (uploadUrl: string, comp: "lease" | "snapshot") => {
        const url = new URL(uploadUrl);
        url.searchParams.set("comp", comp);
        const headers: Record<string, string> = { "x-ms-version": "2021-12-02" };
        if (comp === "lease") Object.assign(headers, { "x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1" });
        const res = await fetch(url, { method: "PUT", headers });
        assert.is(res.status, 201, `${comp}: ${await res.text()}`);
      };
      // Names sort "a…" before "z…": a blob the sweep could not delete would
      // hold up the others' in every sweep, each listing from the start.
      const first = `a${newEntityId()}`;
      const abandoned = await uploadOnly(svc, first);
      await asUploader(abandoned.res.body.upload_url, "snapshot");
      await asUploader(abandoned.res.body.upload_url, "lease");
      const confirmedUp = await uploadOnly(svc, first, { version: "2030.01.01-000000" });
      await asUploader(confirmedUp.res.body.upload_url, "lease");
      const confirmed = await svc.rest.post(`/api/entities/${first}/versions/confirm`, {
        storage_path: confirmedUp.res.body.storage_path,
        version: confirmedUp.version,
        source_hash: confirmedUp.sourceHash,
        file_size_bytes: Buffer.byteLength(confirmedUp.content),
      });
      assert.is(confirmed.status, 201, JSON.stringify(confirmed.body));
      const last = `z${newEntityId()}`;
      const lastUp = await uploadOnly(svc, last);
      await sleep(1_500);
      await app.sweeper.runOnce();
      for (const path of [abandoned.res.body.storage_path, confirmedUp.res.body.storage_path, lastUp.res.body.storage_path]) {
        assert.is(await blobs.stat(path), undefined, `${path} is deleted`);
      }
      assert.ok((await blobs.stat(confirmed.body.version.storage_path)) !== undefined, "the version's own copy stays");
      await assertStorageConsistent(svc, [first, last], 1_000 + 500);
    } finally {
      await svc.close();
    }
  });

  s("a stray blob gone by the time the sweeper deletes it (the deleter or another replica took it) is not counted as swept", async () => {
    // Blobs whose deletion someone else wins: gone just before the sweeper's own delete reaches the store.
    const raced = new Set<string>();
    const svc = await startService(backend, {
      env: { ORPHAN_GRACE_SECONDS: "1", SWEEP_INTERVAL_SECONDS: "3600" },
      blobStore: (store) =>
        blobStoreWith(store, {
          deleteIfExists: async (path, signal) => {
            if (raced.has(path)) await store.deleteIfExists(path, signal);
            return store.deleteIfExists(path, signal);
          },
        }),
    });
    const app = (svc as TestService & { app: App }).app;
    const strayCount = async () => Number(/^entity_versions_sweeper_swept_total\{kind="stray_blob"\} (\d+)/m.exec(await (await fetch(`${svc.url}/metrics`)).text())?.[1] ?? 0);
    try {
      const { BlobServiceClient } = await import("@azure/storage-blob");
      const container = BlobServiceClient.fromConnectionString(svc.env["AZURE_STORAGE_CONNECTION_STRING"]!).getContainerClient(svc.env["AZURE_STORAGE_CONTAINER"]!);
      const e = newEntityId();
      const gone = `uploads/${e}/00000000-0000-4000-8000-000000000001/package`;
      const stray = `uploads/${e}/00000000-0000-4000-8000-000000000002/package`;
      for (const name of [gone, stray]) await container.getBlockBlobClient(name).upload("stray", 5);
      raced.add(gone);
      await sleep(1_500);
      const before = await strayCount();
      const result = await app.sweeper.runOnce();
      assert.is(result.strayBlobs, 1, "only the blob the sweeper itself deleted");
      assert.is((await strayCount()) - before, 1, "stray_blob counts what the sweeper removed");
      assert.is(await container.getBlockBlobClient(stray).exists(), false);
    } finally {
      await svc.close();
    }
  });

  s("a sweep's database reads are a few statements per batch of listed blobs, not per blob, and each looks a blob up under its own entity", async () => {
    const tdb = await createTestDatabase(backend);
    const env = await serviceEnv(tdb);
    const db = openDatabase(loadConfig(env).database);
    const connectionString = env["AZURE_STORAGE_CONNECTION_STRING"]!;
    const container = BlobServiceClient.fromConnectionString(connectionString).getContainerClient(env["AZURE_STORAGE_CONTAINER"]!);
    try {
      await container.createIfNotExists();
      await migrateLatest(db.knex);
      const old = new Date(Date.now() - 3_600_000);
      const entities = Array.from({ length: 7 }, () => newEntityId());
      const [a, b] = entities as [string, string];
      // 260 versions, each with its package and lockfile under versions/
      // (two listing batches), and its confirmed upload.
      const versions = Array.from({ length: 260 }, (_, n) => ({ entityId: entities[n % entities.length]!, id: randomUUID(), uploadId: randomUUID() }));
      for (let from = 0; from < versions.length; from += 100) {
        const chunk = versions.slice(from, from + 100);
        await db.knex("uploads").insert(chunk.map((v) => ({ id: v.uploadId, entity_id: v.entityId, state: "confirmed", created_at: old })));
        await db.knex("versions").insert(
          chunk.map((v, i) => ({
            id: v.id,
            entity_id: v.entityId,
            seq: from + i + 1,
            version: `2020.01.01-${String(from + i).padStart(6, "0")}`,
            source_hash: "c".repeat(64),
            upload_id: v.uploadId,
            storage_path: `versions/${v.entityId}/${v.id}/package`,
            file_size_bytes: 1,
            service_dependencies: "[]",
            published_by: "owner",
            created_at: old,
          })),
        );
      }
      const deleting = randomUUID();
      await db.knex("uploads").insert({ id: deleting, entity_id: a, state: "deleting", created_at: old, next_attempt_at: new Date(Date.now() + 3_600_000) });
      const kept = [
        ...versions.flatMap((v) => [`versions/${v.entityId}/${v.id}/package`, `versions/${v.entityId}/${v.id}/package-lock.json`]),
        // A version kept under its upload's id (before versions had folders of their own).
        `versions/${versions[0]!.entityId}/${versions[0]!.uploadId}/package`,
        // The deleter's.
        `uploads/${a}/${deleting}/package`,
      ];
      const strays = [
        // Confirmed uploads' staged blobs.
        ...versions.slice(0, 3).map((v) => `uploads/${v.entityId}/${v.uploadId}/package`),
        // Another entity's version, and another entity's upload, under the same ids: nothing of this entity's.
        `versions/${versions[1]!.entityId === b ? a : b}/${versions[1]!.id}/package`,
        `uploads/${a}/${deleting.replace(/^./, "f")}/package`,
        `uploads/${b}/${deleting}/package`,
      ];
      const names = [...kept, ...strays];
      for (let from = 0; from < names.length; from += 32) {
        await Promise.all(names.slice(from, from + 32).map((name) => container.getBlockBlobClient(name).upload("x", 1)));
      }
      const blobs = new AzureBlobStore({ connectionString, container: container.containerName });
      const deleter = { runOnce: async () => 0 } as unknown as BlobDeleter;
      // Two hours on: every blob just written is past the grace period.
      const later = { now: () => new Date(Date.now() + 7_200_000) };
      const sweeper = new OrphanSweeper(new UploadStore(db), blobs, deleter, later, { warn: () => undefined, error: () => undefined }, { graceMs: 60_000, intervalMs: 3_600_000 });
      const statements: string[] = [];
      db.knex.on("query", (q: { sql: string }) => statements.push(q.sql));
      const result = await sweeper.runOnce();
      assert.is(result.strayBlobs, strays.length);
      const left: string[] = [];
      for (const prefix of ["uploads/", "versions/"]) for await (const blob of blobs.list(prefix)) left.push(blob.name);
      assert.equal(left.sort(), kept.sort());
      // 520 and more blobs under versions/: 2 batches of up to 500, each an
      // upload and a version lookup; 1 batch under uploads/; the search for
      // abandoned uploads. (One by one, it was four for each version.)
      assert.ok(statements.length <= 7, `${statements.length} statements for ${versions.length} versions:\n${statements.slice(0, 5).join("\n")}`);
    } finally {
      await container.deleteIfExists().catch(() => undefined);
      await db.knex.destroy();
      await tdb.drop();
    }
  });

  return s;
}

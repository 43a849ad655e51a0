import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import { startEmbeddedAzurite } from "../../src/blob/embedded-azurite.js";
import { migrateLatest } from "../../src/store/migrate.js";
import knexFactory, { type Knex } from "knex";
import { type Backend, createTestDatabase } from "../support/env.js";
import { CommitDroppingProxy } from "../support/commit-dropping-proxy.js";
import { PrivateMariaDb } from "../support/private-mariadb.js";
import { blobStoreWith, memoryLogger, newEntityId, newSourceHash, nextVersionString, push, putBlob, serviceEnv, spawnService, startService, type TestService, uploadOnly } from "../support/service.js";
import { assertStorageConsistent } from "./sweeper.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * The sweeper's claim of an abandoned upload (issued → deleting), committed
 * while a confirm of that upload holds the entity's lock and has read the
 * upload as issued: the confirm's own claim must then find it gone
 * (UPLOAD_NOT_FOUND), never record a version on an upload being deleted.
 * `dbUrl`: the service's database, reached behind it to play the sweeper.
 */
async function sweptWhileConfirming(svc: TestService, dbUrl: string): Promise<void> {
  const db = knexFactory({ client: "mysql2", connection: dbUrl, pool: { min: 0, max: 2 } });
  let sweeper: Knex.Transaction | undefined;
  try {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version.id as string;
    const up = await uploadOnly(svc, e, { base: v1 });
    const { id: uploadId } = await db("uploads").where({ entity_id: e, state: "issued" }).first("id");
    sweeper = await db.transaction();
    await sweeper("uploads").where({ entity_id: e, id: uploadId, state: "issued" }).update({ state: "deleting" });
    const confirm = svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: up.res.body.storage_path,
      version: up.version,
      source_hash: up.sourceHash,
      file_size_bytes: Buffer.byteLength(up.content),
      base_version_id: v1,
    });
    // This database's own sessions only: the server may be shared with other test runs.
    await until("the confirm waits on the upload's row", async () => {
      const [rows] = (await db.raw("select info from information_schema.processlist where db = database() and info like 'update `uploads`%confirmed%'")) as [unknown[]];
      return rows.length > 0;
    });
    await sweeper.commit();
    const res = await confirm;
    assert.equal([res.status, res.body.code], [400, "UPLOAD_NOT_FOUND"], JSON.stringify(res.body));
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 1);
  } finally {
    if (sweeper !== undefined && !sweeper.isCompleted()) await sweeper.rollback();
    await db.destroy();
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
      // A blob store that takes connections and never answers: the deletion
      // is answered once committed, within a deadline shorter than the blob
      // store's timeout.
      const hung = new Set<net.Socket>();
      const silent = net.createServer((socket) => hung.add(socket));
      await new Promise<void>((resolve) => silent.listen(port, "127.0.0.1", resolve));
      const del = await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`, { "grpc-timeout": "500m" });
      assert.is(del.status, 200, JSON.stringify(del.body));
      for (const socket of hung) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
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

  s("versions deleted faster than the blob store deletes their blobs: each answered at once, at most 16 deletions run in the background, the rest are left to the periodic pass", async () => {
    let gated = false;
    let open = () => undefined as void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    // The versions whose blob deletions are under way (each deletion asks for its version's folder among others).
    const underWay = new Set<string>();
    const svc = await startService(backend, {
      env: { BLOB_DELETION_INTERVAL_MS: "200" },
      blobStore: (store) =>
        blobStoreWith(store, {
          deleteIfExists: async (path, signal) => {
            if (!gated) return store.deleteIfExists(path, signal);
            const version = /^versions\/[^/]+\/([^/]+)\//.exec(path)?.[1];
            if (version !== undefined) underWay.add(version);
            await opened;
            return store.deleteIfExists(path, signal);
          },
        }),
    });
    try {
      const e = newEntityId();
      const versions = [(await push(svc, e, { setAsActive: true })).confirm!.body.version];
      for (let i = 0; i < 30; i++) versions.push((await push(svc, e, { base: versions[versions.length - 1]!.id })).confirm!.body.version);
      gated = true;
      const deletes = await Promise.all(versions.slice(1).map((v) => svc.rest.delete(`/api/entities/${e}/versions/${v.id}`)));
      assert.equal([...new Set(deletes.map((d) => d.status))], [200], "every deletion answered while the blob store holds every delete");
      // 16 at once, and maybe one more the periodic pass has taken up.
      const ids = new Set(versions.map((v) => v.id));
      const deleting = [...underWay].filter((id) => ids.has(id)).length;
      assert.ok(deleting >= 16 && deleting <= 17, `${deleting} deletions under way`);
      gated = false;
      open();
      const blobs = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      await until("every deleted version's package to go", async () => (await Promise.all(versions.slice(1).map((v) => blobs.stat(v.storage_path)))).every((st) => st === undefined));
      assert.ok((await blobs.stat(versions[0]!.storage_path)) !== undefined, "the kept version's package stays");
    } finally {
      open();
      await svc.close();
    }
  });

  s("a stop during a pass of blob deletions on a slow blob store waits for the row under way, not for the rest of the pass", async () => {
    let slow = false;
    let stopping = false;
    // The versions whose blob deletions began after the stop began.
    const begunAfterStop = new Set<string>();
    const begun = new Set<string>();
    const svc = await startService(backend, {
      env: { BLOB_DELETION_INTERVAL_MS: "200" },
      blobStore: (store) =>
        blobStoreWith(store, {
          deleteIfExists: async (path, signal) => {
            if (slow) {
              const version = /^versions\/[^/]+\/([^/]+)\//.exec(path)?.[1];
              if (version !== undefined) begun.add(version);
              if (stopping && version !== undefined) begunAfterStop.add(version);
              await sleep(300);
            }
            return store.deleteIfExists(path, signal);
          },
        }),
    });
    let closed = false;
    try {
      const e = newEntityId();
      const versions = [(await push(svc, e, { setAsActive: true })).confirm!.body.version];
      for (let i = 0; i < 36; i++) versions.push((await push(svc, e, { base: versions[versions.length - 1]!.id })).confirm!.body.version);
      slow = true;
      // 16 deleted at once in the background; the other 20 are the periodic pass's, 300 ms each.
      for (const v of versions.slice(1)) assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v.id}`)).status, 200);
      // The 16 begun at once, and the periodic pass under way: on a busy
      // machine that takes longer than it should, and a deletion begun late
      // would count as begun after the stop.
      for (const end = Date.now() + 15_000; begun.size < 17 && Date.now() < end; ) await sleep(50);
      assert.ok(begun.size >= 17, `${begun.size} deletions begun before the stop`);
      stopping = true;
      await svc.close();
      closed = true;
      assert.ok(begunAfterStop.size <= 1, `${begunAfterStop.size} deletions begun after the stop`);
    } finally {
      if (!closed) await svc.close();
    }
  });

  s("Azurite stopped during confirms and deletes: 503 with a retry hint, nothing half-done, consistent once it is back", async () => {
    const location = fs.mkdtempSync(path.join(os.tmpdir(), "ev-azurite-"));
    let azurite = await startEmbeddedAzurite({ location });
    const port = Number(new URL(azurite.blobEndpoint).port);
    const { logger, text } = memoryLogger();
    const svc = await startService(backend, {
      env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, BLOB_DELETION_INTERVAL_MS: "200", BLOB_TIMEOUT_MS: "1500", ORPHAN_GRACE_SECONDS: "1" },
      logger,
    });
    try {
      const e = newEntityId();
      const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
      const v2 = (await push(svc, e, { base: v1.id, lockfile: "{}" })).confirm!.body.version;
      const pending = await uploadOnly(svc, e, { base: v2.id });
      await azurite.stop();
      const confirm = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: pending.res.body.storage_path,
        version: pending.version,
        source_hash: pending.sourceHash,
        file_size_bytes: Buffer.byteLength(pending.content),
        base_version_id: v2.id,
      });
      assert.is(confirm.status, 503);
      assert.is(confirm.body.code, "BLOB_STORE_UNAVAILABLE");
      assert.is(confirm.headers.get("retry-after"), "1");
      const viaGrpc = await svc.grpc.call("ConfirmUpload", { entity_id: e, storage_path: pending.res.body.storage_path, version: pending.version, source_hash: pending.sourceHash, file_size_bytes: Buffer.byteLength(pending.content), base_version_id: v2.id });
      assert.ok(!viaGrpc.ok && viaGrpc.error.code === 14 && viaGrpc.error.reason === "BLOB_STORE_UNAVAILABLE" && viaGrpc.error.retryable);
      assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 2, "nothing was written");
      const ready = await svc.restAs({}).get("/readyz");
      assert.is(ready.status, 503);
      assert.match(ready.body.checks.blob_store, "unavailable");
      assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`)).status, 200, "the record goes; its blobs wait");
      azurite = await startEmbeddedAzurite({ location, port });
      const retried = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: pending.res.body.storage_path,
        version: pending.version,
        source_hash: pending.sourceHash,
        file_size_bytes: Buffer.byteLength(pending.content),
        base_version_id: v1.id,
      });
      assert.is(retried.status, 201, JSON.stringify(retried.body));
      const blobs = new AzureBlobStore({ connectionString: azurite.connectionString, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      await until("the deleted version's blobs to go", async () => (await blobs.stat(v2.storage_path)) === undefined);
      await sleep(1_200);
      await (svc as typeof svc & { app: { sweeper: { runOnce(): Promise<unknown> } } }).app.sweeper.runOnce();
      await assertStorageConsistent({ ...svc, env: { ...svc.env, AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString } }, [e], 1_500);
      assert.match(text(), "blob store unavailable");
      // Each cause is logged with the reqId its answer named (x-request-id), REST and gRPC alike: matched to its call.
      const causes = text()
        .split("\n")
        .filter((line) => line.includes('"blob store unavailable"'))
        .map((line) => JSON.parse(line) as { reqId?: string; rpc?: string });
      assert.ok(causes.length >= 2, JSON.stringify(causes));
      assert.ok(causes.some((c) => c.reqId === confirm.headers.get("x-request-id")), `no cause carries ${confirm.headers.get("x-request-id")}: ${JSON.stringify(causes)}`);
      assert.ok(causes.every((c) => typeof c.reqId === "string"), JSON.stringify(causes));
      assert.not.match(text(), /sig=[^\[]|SharedKey|AccountKey/);
    } finally {
      await svc.close();
      await azurite.stop();
      fs.rmSync(location, { recursive: true, force: true });
    }
  });

  if (backend === "mysql") {
    /** A test that needs a MariaDB server of its own: where the machine has none, left out and named in the run's report (test/contract/index.ts). */
    const withPrivateMariaDb = (name: string, test: () => Promise<void>) =>
      PrivateMariaDb.available() ? s(name, test) : PrivateMariaDb.leaveOut(`${backend}: faults: ${name}`);

    s("lock waits are bounded: a confirm behind a held entity lock answers 503 DATABASE_BUSY, then works", async () => {
      const svc = await startService(backend, { env: { DATABASE_LOCK_WAIT_TIMEOUT_SECONDS: "1" } });
      const knex = knexFactory({ client: "mysql2", connection: svc.env["DATABASE_URL"]! });
      try {
        const e = newEntityId();
        const v1 = (await push(svc, e)).confirm!.body.version;
        const p = await uploadOnly(svc, e, { base: v1.id });
        const body = { storage_path: p.res.body.storage_path, version: p.version, source_hash: p.sourceHash, file_size_bytes: Buffer.byteLength(p.content), base_version_id: v1.id };
        const trx = await knex.transaction();
        await trx("entities").where("id", e).forUpdate().first();
        const started = Date.now();
        const busy = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
        const waited = Date.now() - started;
        await trx.rollback();
        assert.is(busy.status, 503, JSON.stringify(busy.body));
        assert.is(busy.body.code, "DATABASE_BUSY");
        assert.is(busy.headers.get("retry-after"), "1");
        assert.ok(waited < 15_000, `bounded wait (${waited} ms)`);
        assert.is((await svc.rest.post(`/api/entities/${e}/versions/confirm`, body)).status, 201);
      } finally {
        await knex.destroy();
        await svc.close();
      }
    });

    s("a connection lost after COMMIT was sent: 503 COMMIT_OUTCOME_UNKNOWN, not \"nothing was changed\"; the change landed, and a retried confirm answers it", async () => {
      const db = await createTestDatabase("mysql");
      const proxy = await CommitDroppingProxy.start(db.url);
      const svc = await startService(backend, { db: { url: proxy.url(), drop: () => db.drop() } });
      try {
        const e = newEntityId();
        const v1 = (await push(svc, e)).confirm!.body.version;
        const p = await uploadOnly(svc, e, { base: v1.id });
        const body = { storage_path: p.res.body.storage_path, version: p.version, source_hash: p.sourceHash, file_size_bytes: Buffer.byteLength(p.content), base_version_id: v1.id };
        proxy.arm();
        const lost = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
        assert.is(proxy.dropped, 1, "the COMMIT was cut off");
        assert.is(lost.status, 503, JSON.stringify(lost.body));
        assert.is(lost.body.code, "COMMIT_OUTCOME_UNKNOWN");
        assert.match(lost.body.error, /may have been made/);
        const retried = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
        assert.is(retried.status, 200, "the first confirm landed: its retry finds its version");
        assert.is(retried.body.created, false);

        // A delete whose COMMIT answer is lost: told so, and the version is gone.
        const active = (await svc.rest.get(`/api/entities/${e}/active-version`)).body.id as string | undefined;
        const doomed = active === v1.id ? (retried.body.version.id as string) : v1.id;
        proxy.arm();
        const deleted = await svc.rest.delete(`/api/entities/${e}/versions/${doomed}`);
        assert.is(deleted.status, 503, JSON.stringify(deleted.body));
        assert.is(deleted.body.code, "COMMIT_OUTCOME_UNKNOWN");
        // The server may still be finishing the COMMIT it was sent.
        let gone = "";
        for (let tries = 0; gone !== "VERSION_NOT_FOUND" && tries < 50; tries++) {
          if (tries > 0) await sleep(100);
          gone = (await svc.rest.get(`/api/entities/${e}/versions/${doomed}`)).body.code;
        }
        assert.is(gone, "VERSION_NOT_FOUND");
        const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events as Array<{ type: string }>;
        assert.is(events[0]!.type, "EVENT_TYPE_VERSION_DELETED", "the delete and its event landed together");
      } finally {
        await svc.close();
        await proxy.close();
      }
    });

    // Not on SQLite: there a confirm whose snapshot the sweeper's commit
    // outdated cannot write at all (SQLITE_BUSY_SNAPSHOT, 503), whatever its claim says.
    s("a confirm whose upload the sweeper abandons meanwhile answers UPLOAD_NOT_FOUND (the suite's own database, snapshot isolation off as on MySQL 8)", async () => {
      const svc = await startService(backend);
      try {
        await sweptWhileConfirming(svc, svc.env["DATABASE_URL"]!);
      } finally {
        await svc.close();
      }
    });

    withPrivateMariaDb("a confirm whose upload the sweeper abandons meanwhile answers UPLOAD_NOT_FOUND on a MariaDB with snapshot isolation (11.6's default)", async () => {
      const mariadb = await PrivateMariaDb.start(["--innodb-snapshot-isolation=ON"]);
      const svc = await startService(backend, { db: { url: mariadb.url(), drop: async () => undefined } });
      try {
        await sweptWhileConfirming(svc, mariadb.url());
      } finally {
        await svc.close();
        await mariadb.stop();
      }
    });

    withPrivateMariaDb("MariaDB killed during a stream of pushes: 503 with a retry hint, nothing half-written, recovers by itself", async () => {
      const mariadb = await PrivateMariaDb.start();
      const svc = await startService(backend, {
        db: { url: mariadb.url(), drop: async () => undefined },
        env: { DATABASE_ACQUIRE_TIMEOUT_MS: "1000" },
      });
      try {
        const entities = Array.from({ length: 4 }, () => newEntityId());
        const outcomes: Array<{ status: number; code?: string; retryAfter: string | null }> = [];
        const accepted = new Map<string, string[]>(entities.map((e) => [e, []]));
        const trace = new Map<string, string[]>(entities.map((e) => [e, []]));
        let stop = false;
        const retrying = async (e: string, step: string, call: () => Promise<{ status: number; body: any; headers: Headers }>) => {
          for (;;) {
            const res = await call();
            outcomes.push({ status: res.status, code: res.body?.code, retryAfter: res.headers.get("retry-after") });
            if (res.status === 503) trace.get(e)!.push(`${step}:503:${res.body?.code}`);
            if (res.status !== 503) return res;
            await sleep(100);
          }
        };
        const worker = async (e: string) => {
          let base: string | undefined;
          while (!stop) {
            const version = nextVersionString();
            const sourceHash = newSourceHash();
            const content = `package ${version}`;
            const up = await retrying(e, "up", () => svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version, source_hash: sourceHash, ...(base ? { base_version_id: base } : {}) }));
            if (up.status !== 200) {
              const list = await svc.rest.get(`/api/entities/${e}/versions?page_size=1000`);
              throw new Error(`upload-url ${up.status} ${up.body.code}; accepted ${JSON.stringify(accepted.get(e))}; stored ${JSON.stringify(list.body.versions?.map((v: { id: string; source_hash: string }) => [v.id, v.source_hash.slice(0, 6)]))}; log ${JSON.stringify(trace.get(e))}`);
            }
            assert.is(await putBlob(up.body.upload_url, content, up.body.upload_headers), 201);
            const confirm = await retrying(e, "confirm", () =>
              svc.rest.post(`/api/entities/${e}/versions/confirm`, {
                storage_path: up.body.storage_path, version, source_hash: sourceHash, file_size_bytes: Buffer.byteLength(content), ...(base ? { base_version_id: base } : {}),
              }),
            );
            trace.get(e)!.push(`${sourceHash.slice(0, 6)}:${confirm.status}:${confirm.body.version?.id ?? confirm.body.code}`);
            // 201, or 200 when a confirm whose answer was lost had committed.
            assert.ok(confirm.status === 201 || confirm.status === 200, JSON.stringify(confirm.body));
            base = confirm.body.version.id;
            accepted.get(e)!.push(base!);
          }
        };
        // A worker's failure is kept for the assertions below, not left to crash the run.
        const workerErrors: unknown[] = [];
        const workers = entities.map((e) => worker(e).catch((error: unknown) => void workerErrors.push(error)));
        await sleep(1_500);
        await mariadb.kill();
        const downSince = Date.now();
        await until("a request to fail while MariaDB is down", async () => outcomes.some((o) => o.status === 503));
        assert.is((await svc.restAs({}).get("/readyz")).status, 503);
        await sleep(Math.max(0, 1_500 - (Date.now() - downSince)));
        await mariadb.startServer();
        const countAfterRestart = outcomes.length;
        await until("pushes to succeed again", async () => workerErrors.length > 0 || outcomes.slice(countAfterRestart).filter((o) => o.status === 200 || o.status === 201).length >= 8);
        stop = true;
        await Promise.all(workers);
        assert.equal(workerErrors.map(String), [], "every push ended in 200 or 201 after retries");
        const failures = outcomes.filter((o) => o.status >= 500);
        assert.ok(failures.length > 0, "the outage was seen");
        for (const f of failures) {
          assert.is(f.status, 503);
          // COMMIT_OUTCOME_UNKNOWN when MariaDB died with a COMMIT on its way: the confirm's retry then finds its version.
          assert.ok(["DATABASE_UNAVAILABLE", "DATABASE_BUSY", "COMMIT_OUTCOME_UNKNOWN"].includes(String(f.code)), String(f.code));
          assert.is(f.retryAfter, "1");
        }
        for (const e of entities) {
          const list = await svc.rest.get(`/api/entities/${e}/versions?page_size=1000`);
          assert.equal(list.body.versions.map((v: { id: string }) => v.id), [...accepted.get(e)!].reverse(), "exactly the accepted pushes, newest first");
        }
        await assertStorageConsistent(svc, entities, 60_000);
        assert.is((await svc.restAs({}).get("/readyz")).status, 200);
      } finally {
        await svc.close();
        await mariadb.destroy();
      }
    });

    withPrivateMariaDb("a read-only MariaDB (a demoted primary): writes 503 with a retry hint, reads and readiness go on, and the connections that met it are replaced", async () => {
      const mariadb = await PrivateMariaDb.start();
      const admin = knexFactory({ client: "mysql2", connection: mariadb.url(), pool: { min: 0, max: 1 } });
      // read_only binds users without SUPER (or READ_ONLY ADMIN), as a service's own user is.
      await admin.raw("CREATE USER 'svc'@'127.0.0.1' IDENTIFIED BY 'svc-password'");
      await admin.raw("GRANT ALL ON test.* TO 'svc'@'127.0.0.1'");
      const url = mariadb.url().replace("root:@", "svc:svc-password@");
      const svc = await startService(backend, { db: { url, drop: async () => undefined }, env: { DATABASE_POOL_MAX: "4" } });
      const sessions = async () =>
        new Set(((await admin.raw("SELECT ID AS id FROM information_schema.PROCESSLIST WHERE USER = 'svc'")) as [Array<{ id: number }>])[0].map((r) => r.id));
      try {
        const e = newEntityId();
        const v1 = (await push(svc, e)).confirm!.body.version;
        await Promise.all(Array.from({ length: 8 }, () => svc.rest.get(`/api/entities/${e}/versions/${v1.id}`)));
        const before = await sessions();
        assert.ok(before.size > 0);
        await admin.raw("SET GLOBAL read_only = 1");

        const refused = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: newSourceHash(), base_version_id: v1.id });
        assert.is(refused.status, 503, JSON.stringify(refused.body));
        assert.is(refused.body.code, "DATABASE_UNAVAILABLE");
        assert.is(refused.headers.get("retry-after"), "1");
        assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v1.id}`)).status, 200, "reads are served");
        const ready = await svc.restAs({}).get("/readyz");
        assert.is(ready.status, 200, "a replica that serves reads stays in rotation");
        assert.is(ready.body.checks.database, "ok (READ_ONLY)");
        // Another replica starting now, on an up-to-date schema, writes nothing.
        const starting = knexFactory({ client: "mysql2", connection: url, pool: { min: 0, max: 2 } });
        await migrateLatest(starting).finally(() => starting.destroy());

        await admin.raw("SET GLOBAL read_only = 0");
        const v2 = (await push(svc, e, { base: v1.id })).confirm!;
        assert.is(v2.status, 201, JSON.stringify(v2.body));
        await Promise.all(Array.from({ length: 8 }, () => svc.rest.get(`/api/entities/${e}/versions/${v1.id}`)));
        await until("the connections opened before the refusal to be closed", async () => [...(await sessions())].every((id) => !before.has(id)), 10_000);
      } finally {
        await svc.close();
        await admin.destroy();
        await mariadb.destroy();
      }
    });

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

    s("migrations racing on an empty database leave Knex's lock table with one row, and a table left with several is repaired", async () => {
      const lockRows = async (k: ReturnType<typeof knexFactory>) => (await k("knex_migrations_lock").select("index", "is_locked")).length;
      for (let round = 0; round < 4; round++) {
        const db = await createTestDatabase("mysql");
        const knexes = Array.from({ length: 4 }, () => knexFactory({ client: "mysql2", connection: db.url, pool: { min: 0, max: 2 } }));
        try {
          await Promise.all(knexes.map((k) => migrateLatest(k, 20_000)));
          assert.is(await lockRows(knexes[0]!), 1, `round ${round}`);
        } finally {
          await Promise.all(knexes.map((k) => k.destroy()));
          await db.drop();
        }
      }
      // What two racing replicas left before: two unlocked rows, a lock nobody could take.
      const db = await createTestDatabase("mysql");
      const k = knexFactory({ client: "mysql2", connection: db.url, pool: { min: 0, max: 2 } });
      try {
        await k.schema.createTable("knex_migrations_lock", (t) => {
          t.increments("index").primary();
          t.integer("is_locked");
        });
        await k("knex_migrations_lock").insert([{ is_locked: 0 }, { is_locked: 0 }]);
        await migrateLatest(k, 5_000);
        assert.is(await lockRows(k), 1);
        assert.ok(await k.schema.hasTable("versions"));
      } finally {
        await k.destroy();
        await db.drop();
      }
    });
  }

  return s;
}

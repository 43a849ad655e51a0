import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { BlobServiceClient, BlockBlobClient } from "@azure/storage-blob";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import type { Backend } from "../support/env.js";
import { rawGrpc } from "../support/grpc-client.js";
import { blobGone, blobStoreWith, newEntityId, newSourceHash, nextVersionString, push, putBlob, startService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, token } from "../support/tokens.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));


const isoUtc = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

/** Spec 4.1, 4.2, 4.7, 7 and 9 over REST: push, deduplication, push protection. */
export function pushSuite(backend: Backend) {
  const s = serviceSuite("push: upload-url, confirm, deduplication, push protection", backend);

  s("a first push needs no base and answers 201 with the whole Version", async ({ svc }) => {
    const e = newEntityId();
    const { confirm, version, sourceHash, res } = await push(svc, e, { extra: { service_dependencies: ["billing", "auth-api"], package_json: { name: "x", n: 1, nested: { a: [1, "b", null, true] } } } });
    assert.is(res.status, 200);
    assert.is(confirm!.status, 201);
    const v = confirm!.body.version;
    assert.is(confirm!.body.created, true);
    assert.equal(
      Object.keys(v).sort(),
      ["created_at", "entity_id", "file_size_bytes", "id", "is_active", "package_json", "package_md5", "published_by", "service_dependencies", "source_hash", "storage_path", "version"].sort(),
    );
    assert.is(v.entity_id, e);
    assert.is(v.version, version);
    assert.is(v.source_hash, sourceHash);
    // The version's own copy, in its own folder, not the staging path the client uploaded to.
    assert.is(v.storage_path, `versions/${e}/${v.id}/package`);
    assert.match(res.body.storage_path, /^uploads\//);
    assert.is(v.package_md5, createHash("md5").update(`package ${version} ${sourceHash}`).digest("base64"));
    assert.type(v.file_size_bytes, "number");
    assert.is(v.file_size_bytes, Buffer.byteLength(`package ${version} ${sourceHash}`));
    assert.equal(v.service_dependencies, ["billing", "auth-api"]);
    assert.equal(v.package_json, { name: "x", n: 1, nested: { a: [1, "b", null, true] } });
    assert.is(v.published_by, "tester");
    assert.is(v.is_active, false);
    assert.ok(isoUtc.test(v.created_at), v.created_at);
  });

  s("upload-url returns both URLs, their paths, the expiry and the PUT headers", async ({ svc }) => {
    const e = newEntityId();
    const before = Date.now();
    const { res } = await uploadOnly(svc, e);
    const b = res.body;
    assert.equal(Object.keys(b).sort(), ["expires_at", "lockfile_upload_url", "max_file_size_bytes", "max_package_json_bytes", "max_package_json_values", "package_lock_path", "storage_path", "upload_headers", "upload_url"]);
    assert.ok(b.storage_path.startsWith(`uploads/${e}/`) && b.storage_path.endsWith("/package"));
    assert.ok(b.package_lock_path.startsWith(`uploads/${e}/`) && b.package_lock_path.endsWith("/package-lock.json"));
    assert.equal(b.upload_headers, { "x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream" });
    assert.is(b.max_file_size_bytes, 256 * 1024 * 1024, "the MAX_PACKAGE_BYTES default, as a JSON number");
    assert.equal([b.max_package_json_bytes, b.max_package_json_values], [256 * 1024, 10_000], "the MAX_PACKAGE_JSON_BYTES and MAX_PACKAGE_JSON_VALUES defaults");
    const ttl = Date.parse(b.expires_at) - before;
    assert.ok(ttl > 14 * 60_000 && ttl <= 15 * 60_000, `upload URL ttl ${ttl} ms`);
    assert.ok(new URL(b.upload_url).searchParams.get("sp") === "cw");
  });

  s("the second push must name the tip: without base it is 409 STALE_BASE with the tip (spec 7)", async ({ svc }) => {
    const e = newEntityId();
    const first = (await push(svc, e)).confirm!.body.version;
    for (const path of ["upload-url", "confirm"]) {
      const r = await svc.rest.post(`/api/entities/${e}/versions/${path}`, {
        storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`,
        version: nextVersionString(),
        source_hash: newSourceHash(),
        file_size_bytes: 1,
        ...(path === "upload-url" ? { storage_path: undefined, file_size_bytes: undefined } : {}),
      });
      assert.is(r.status, 409, path);
      assert.equal(Object.keys(r.body).sort(), ["code", "error", "latest_version"]);
      assert.is(r.body.code, "STALE_BASE");
      assert.match(r.body.error, /^No base_version_id, and the entity already has versions: base_version_id must name its tip/);
      assert.equal(r.body.latest_version, { id: first.id, version: first.version, published_by: first.published_by, created_at: first.created_at });
    }
  });

  s("a stale base is 409 on upload-url and on confirm, even with force", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    for (const force of [false, true]) {
      const up = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: newSourceHash(), base_version_id: v1.id, force });
      assert.is(up.status, 409);
      assert.is(up.body.code, "STALE_BASE");
      assert.is(up.body.latest_version.id, v2.id);
    }
    // Upload-url on the tip, then the tip moves before the confirm.
    const pending = await uploadOnly(svc, e, { base: v2.id });
    const v3 = (await push(svc, e, { base: v2.id })).confirm!.body.version;
    for (const force of [false, true]) {
      const c = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: pending.res.body.storage_path,
        version: pending.version,
        source_hash: pending.sourceHash,
        file_size_bytes: Buffer.byteLength(pending.content),
        base_version_id: v2.id,
        force,
      });
      assert.is(c.status, 409);
      assert.is(c.body.code, "STALE_BASE");
      assert.is(c.body.latest_version.id, v3.id);
    }
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(list.body.versions.map((v: { id: string }) => v.id), [v3.id, v2.id, v1.id]);
  });

  s("a base named on an entity with no versions is STALE_BASE with latest_version null", async ({ svc }) => {
    const e = newEntityId();
    const r = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: newSourceHash(), base_version_id: "no-such-version" });
    assert.is(r.status, 409);
    assert.equal(r.body, { error: r.body.error, code: "STALE_BASE", latest_version: null });
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.code, "ENTITY_NOT_FOUND");
  });

  s("upload-url deduplicates before push protection; force issues URLs on the tip", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    // Same source as v1, from a stale base and from none: the existing version, no URL.
    for (const base of [v1.id, undefined]) {
      const r = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: v1.source_hash, ...(base ? { base_version_id: base } : {}) });
      assert.is(r.status, 200);
      // No URL, no path, no expiry: only the (empty) header map proto3 JSON always writes.
      assert.equal(r.body, { existing_version: v1, upload_headers: {} });
    }
    const forced = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: v1.source_hash, base_version_id: v2.id, force: true });
    assert.is(forced.status, 200);
    assert.type(forced.body.upload_url, "string");
    assert.is(forced.body.existing_version, undefined);
  });

  s("re-confirming published source answers 200 with the existing version, even from a stale base", async ({ svc }) => {
    const e = newEntityId();
    const p1 = await push(svc, e);
    const v1 = p1.confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    const again = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: p1.res.body.storage_path,
      version: p1.version,
      source_hash: p1.sourceHash,
      file_size_bytes: Buffer.byteLength(p1.content),
    });
    assert.is(again.status, 200);
    assert.equal(again.body, { version: v1, created: false, already_confirmed: true });
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(list.body.versions.map((v: { id: string }) => v.id), [v2.id, v1.id]);
  });

  s("force creates a second version with the same source hash", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const p2 = await push(svc, e, { sourceHash: v1.source_hash, base: v1.id, force: true });
    assert.is(p2.confirm!.status, 201);
    assert.is(p2.confirm!.body.version.source_hash, v1.source_hash);
    assert.is(p2.confirm!.body.version.base_version_id, v1.id);
    assert.is.not(p2.confirm!.body.version.id, v1.id);
    // Deduplication now answers the newest of the two.
    const r = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: v1.source_hash });
    assert.is(r.body.existing_version.id, p2.confirm!.body.version.id);
  });

  s("set_as_active makes the new version active", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    assert.is(v1.is_active, true);
    const v2 = (await push(svc, e, { base: v1.id, setAsActive: true })).confirm!.body.version;
    const active = await svc.rest.get(`/api/entities/${e}/active-version`);
    assert.is(active.status, 200);
    assert.equal(active.body, v2);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v1.id}`)).body.is_active, false);
  });

  s("a version string is unique in its entity: 409 VERSION_ALREADY_EXISTS on both endpoints", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const up = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: v1.version, source_hash: newSourceHash(), base_version_id: v1.id });
    assert.is(up.status, 409);
    assert.is(up.body.code, "VERSION_ALREADY_EXISTS");
    // Two uploads prepared on v1 with one version string; the first confirm wins it.
    const shared = nextVersionString();
    const a = await uploadOnly(svc, e, { base: v1.id, version: shared });
    const b = await uploadOnly(svc, e, { base: v1.id, version: shared });
    const ca = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { storage_path: a.res.body.storage_path, version: shared, source_hash: a.sourceHash, file_size_bytes: Buffer.byteLength(a.content), base_version_id: v1.id });
    assert.is(ca.status, 201);
    const cb = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { storage_path: b.res.body.storage_path, version: shared, source_hash: b.sourceHash, file_size_bytes: Buffer.byteLength(b.content), base_version_id: ca.body.version.id });
    assert.is(cb.status, 409);
    assert.is(cb.body.code, "VERSION_ALREADY_EXISTS");
    assert.match(cb.body.error, shared);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 2);
  });

  s("confirm refuses another entity's blob, a missing blob, a wrong size, and reused uploads, writing nothing", async ({ svc }) => {
    const e = newEntityId();
    const other = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const theirs = await uploadOnly(svc, other);
    const mine = await uploadOnly(svc, e, { base: v1.id });
    const body = (over: Record<string, unknown>) => ({
      storage_path: mine.res.body.storage_path,
      version: mine.version,
      source_hash: mine.sourceHash,
      file_size_bytes: Buffer.byteLength(mine.content),
      base_version_id: v1.id,
      ...over,
    });
    const cases: Array<[Record<string, unknown>, number, string]> = [
      [{ storage_path: theirs.res.body.storage_path }, 400, "INVALID_ARGUMENT"],
      [{ storage_path: `${e}/../${other}/x/package` }, 400, "INVALID_ARGUMENT"],
      [{ storage_path: `uploads/${e}/00000000-0000-4000-8000-000000000000/package` }, 400, "UPLOAD_NOT_FOUND"],
      [{ storage_path: `${e}/00000000-0000-4000-8000-000000000000/package` }, 400, "UPLOAD_NOT_FOUND"],
      [{ storage_path: `versions/${e}/00000000-0000-4000-8000-000000000000/package` }, 400, "INVALID_ARGUMENT"],
      [{ storage_path: v1.storage_path }, 400, "INVALID_ARGUMENT"],
      [{ file_size_bytes: Buffer.byteLength(mine.content) + 1 }, 400, "UPLOAD_SIZE_MISMATCH"],
      [{ package_lock_path: theirs.res.body.package_lock_path }, 400, "INVALID_ARGUMENT"],
      [{ package_lock_path: mine.res.body.package_lock_path }, 400, "UPLOAD_NOT_FOUND"],
      [{ package_lock_path: mine.res.body.storage_path }, 400, "INVALID_ARGUMENT"],
    ];
    for (const [over, status, code] of cases) {
      const r = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body(over));
      assert.is(r.status, status, JSON.stringify(over));
      assert.is(r.body.code, code, JSON.stringify(over));
    }
    // Uploaded under a URL this service never issued: no upload record, refused.
    const blank = await uploadOnly(svc, e, { base: v1.id });
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 1);
    const ok = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body({}));
    assert.is(ok.status, 201);
    // The same upload confirmed again as a forced new push: refused, it made
    // a version already (the same confirm again is a retry: answered that version).
    const reuse = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body({ base_version_id: ok.body.version.id, version: nextVersionString(), source_hash: newSourceHash(), force: true }));
    assert.equal([reuse.status, reuse.body.code], [409, "UPLOAD_ALREADY_CONFIRMED"]);
    assert.ok(blank.res.status === 200);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 2);
  });

  s("a lockfile uploaded with the package is confirmed and downloadable", async ({ svc }) => {
    const e = newEntityId();
    const p = await push(svc, e, { lockfile: '{"lockfileVersion":3}' });
    assert.is(p.confirm!.status, 201);
    const v = p.confirm!.body.version;
    assert.is(v.package_lock_path, `versions/${e}/${v.id}/package-lock.json`);
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${v.id}/download`);
    const lock = await fetch(dl.body.lockfile_download_url);
    assert.is(await lock.text(), '{"lockfileVersion":3}');
  });

  s("a published package never changes: the old upload URL writes only the staging area, which confirm left empty", async ({ svc }) => {
    const e = newEntityId();
    const p = await push(svc, e, { content: "twenty bytes exactly", lockfile: '{"lock":1}' });
    const v = p.confirm!.body.version;
    const store = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
    // Deleted while the answer goes out: gone within moments of it.
    assert.ok(await blobGone(store, p.res.body.storage_path), "the staged package is gone after confirm");
    assert.ok(await blobGone(store, p.res.body.package_lock_path), "the staged lockfile is gone after confirm");
    // The upload URL is still within its lifetime: it may write, but only where no version reads.
    const evil = Buffer.alloc(3 * 1024 * 1024, 0x65);
    assert.is(await putBlob(p.res.body.upload_url, evil, p.res.body.upload_headers), 201);
    assert.is(await putBlob(p.res.body.lockfile_upload_url, "evil", p.res.body.upload_headers), 201);
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${v.id}/download`);
    const bytes = Buffer.from(await (await fetch(dl.body.download_url)).arrayBuffer());
    assert.is(bytes.toString(), "twenty bytes exactly");
    assert.is(bytes.length, v.file_size_bytes);
    assert.is(createHash("md5").update(bytes).digest("base64"), dl.body.version.package_md5);
    assert.is(await (await fetch(dl.body.lockfile_download_url)).text(), '{"lock":1}');
    // A retried confirm of that upload cannot swap it in either.
    const again = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: p.res.body.storage_path,
      version: p.version,
      source_hash: p.sourceHash,
      file_size_bytes: evil.length,
      base_version_id: v.id,
      force: true,
    });
    assert.ok(again.status >= 400 || again.body.version.id === v.id, JSON.stringify(again.body));
    assert.is(Buffer.from(await (await fetch((await svc.rest.get(`/api/entities/${e}/versions/${v.id}/download`)).body.download_url)).arrayBuffer()).toString(), "twenty bytes exactly");
  });

  s("a package or lockfile uploaded as a page or append blob is refused with UPLOAD_NOT_BLOCK_BLOB, and a block blob PUT after it confirms", async ({ svc }) => {
    const e = newEntityId();
    const pageBlob = async (url: string, fill: number) => {
      assert.is(await putBlob(url, "", { "x-ms-blob-type": "PageBlob", "x-ms-blob-content-length": "512" }), 201);
      assert.is(await putBlob(`${url}&comp=page`, Buffer.alloc(512, fill), { "x-ms-page-write": "update", "x-ms-range": "bytes=0-511" }), 201);
    };
    const appendBlob = async (url: string, text: string) => {
      assert.is(await putBlob(url, "", { "x-ms-blob-type": "AppendBlob" }), 201);
      assert.is(await putBlob(`${url}&comp=appendblock`, text, {}), 201);
    };
    const confirm = (up: Awaited<ReturnType<typeof uploadOnly>>, size: number, lock: boolean) =>
      svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: up.res.body.storage_path,
        version: up.version,
        source_hash: up.sourceHash,
        file_size_bytes: size,
        ...(lock ? { package_lock_path: up.res.body.package_lock_path } : {}),
      });
    const up = await uploadOnly(svc, e);
    // Azurite's copy of a page blob shares its pages with the upload, which
    // its URL could then rewrite under the version: refused before the copy.
    await pageBlob(up.res.body.upload_url, 0x41);
    const asPages = await confirm(up, 512, false);
    assert.equal([asPages.status, asPages.body.code], [400, "UPLOAD_NOT_BLOCK_BLOB"], JSON.stringify(asPages.body));
    assert.match(asPages.body.error, "x-ms-blob-type: BlockBlob");
    assert.match(asPages.body.error, up.res.body.storage_path);
    await appendBlob(up.res.body.upload_url, "appended");
    const asAppends = await confirm(up, Buffer.byteLength("appended"), false);
    assert.equal([asAppends.status, asAppends.body.code], [400, "UPLOAD_NOT_BLOCK_BLOB"], JSON.stringify(asAppends.body));
    // A block blob package with a page blob lockfile: refused for the lockfile.
    const content = "a block blob package";
    assert.is(await putBlob(up.res.body.upload_url, content, up.res.body.upload_headers), 201);
    await pageBlob(up.res.body.lockfile_upload_url, 0x4c);
    const lockAsPages = await confirm(up, Buffer.byteLength(content), true);
    assert.equal([lockAsPages.status, lockAsPages.body.code], [400, "UPLOAD_NOT_BLOCK_BLOB"], JSON.stringify(lockAsPages.body));
    assert.match(lockAsPages.body.error, up.res.body.package_lock_path);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions?.length ?? 0, 0, "no version was made");
    // Doing what the message says mends it.
    assert.is(await putBlob(up.res.body.lockfile_upload_url, '{"lock":1}', up.res.body.upload_headers), 201);
    const ok = await confirm(up, Buffer.byteLength(content), true);
    assert.is(ok.status, 201, JSON.stringify(ok.body));
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${ok.body.version.id}/download`);
    assert.is(await (await fetch(dl.body.download_url)).text(), content);
    assert.is(await (await fetch(dl.body.lockfile_download_url)).text(), '{"lock":1}');
  });

  s("a package or lockfile its upload URL moved to the Archive tier is refused with UPLOAD_NOT_READABLE (the store's 409, as for a copy whose destination exists), not confirmed without it", async ({ svc }) => {
    const content = "an archived package";
    const confirmOf = (e: string, up: Awaited<ReturnType<typeof uploadOnly>>, lock: boolean) =>
      svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: up.res.body.storage_path,
        version: up.version,
        source_hash: up.sourceHash,
        file_size_bytes: Buffer.byteLength(content),
        ...(lock ? { package_lock_path: up.res.body.package_lock_path } : {}),
      });
    for (const which of ["package", "lockfile"] as const) {
      const e = newEntityId();
      const up = await uploadOnly(svc, e, { content });
      assert.is(await putBlob(up.res.body.upload_url, content, up.res.body.upload_headers), 201);
      assert.is(await putBlob(up.res.body.lockfile_upload_url, '{"lock":0}', up.res.body.upload_headers), 201);
      await new BlockBlobClient(which === "package" ? up.res.body.upload_url : up.res.body.lockfile_upload_url).setAccessTier("Archive");
      const refused = await confirmOf(e, up, true);
      assert.equal([refused.status, refused.body.code], [400, "UPLOAD_NOT_READABLE"], `${which}: ${JSON.stringify(refused.body)}`);
      assert.match(refused.body.error, which === "package" ? up.res.body.storage_path : up.res.body.package_lock_path);
      assert.match(refused.body.error, "ask for a new upload URL");
      assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions?.length ?? 0, 0, `${which}: no version was made`);
      // Doing what the message says mends it.
      const again = await uploadOnly(svc, e, { content });
      assert.is(await putBlob(again.res.body.upload_url, content, again.res.body.upload_headers), 201);
      assert.is(await putBlob(again.res.body.lockfile_upload_url, '{"lock":1}', again.res.body.upload_headers), 201);
      const ok = await confirmOf(e, again, true);
      assert.is(ok.status, 201, JSON.stringify(ok.body));
      const dl = await svc.rest.get(`/api/entities/${e}/versions/${ok.body.version.id}/download`);
      assert.is(await (await fetch(dl.body.lockfile_download_url)).text(), '{"lock":1}');
    }
  });

  s("a download is answered as a download, whatever headers the package was uploaded with", async ({ svc }) => {
    const e = newEntityId();
    const page = "<script>alert(document.domain)</script>";
    const up = await uploadOnly(svc, e, { content: page });
    const headers = { "x-ms-blob-type": "BlockBlob", "content-type": "text/html", "x-ms-blob-content-disposition": "inline", "x-ms-blob-content-encoding": "gzip" };
    assert.is(await putBlob(up.res.body.upload_url, page, headers), 201);
    const confirm = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: up.res.body.storage_path,
      version: up.version,
      source_hash: up.sourceHash,
      file_size_bytes: Buffer.byteLength(page),
    });
    assert.is(confirm.status, 201, JSON.stringify(confirm.body));
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${confirm.body.version.id}/download`);
    const res = await fetch(dl.body.download_url);
    assert.is(await res.text(), page);
    assert.is(res.headers.get("content-type"), "application/octet-stream");
    assert.is(res.headers.get("content-disposition"), "attachment");
    // Not "gzip": the package's bytes are the same to clients that decode and those that do not.
    assert.is(res.headers.get("content-encoding"), "identity");
  });

  s("an upload issued in the layout before staging is still confirmed, into a sealed copy", async ({ svc }) => {
    const e = newEntityId();
    const up = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: newSourceHash() });
    const legacy = up.body.storage_path.replace(/^uploads\//, "");
    const container = BlobServiceClient.fromConnectionString(svc.env["AZURE_STORAGE_CONNECTION_STRING"]!).getContainerClient(svc.env["AZURE_STORAGE_CONTAINER"]!);
    await container.getBlockBlobClient(legacy).upload("legacy bytes", 12);
    const confirm = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: legacy,
      version: nextVersionString(),
      source_hash: newSourceHash(),
      file_size_bytes: 12,
    });
    assert.is(confirm.status, 201, JSON.stringify(confirm.body));
    assert.match(confirm.body.version.storage_path, /^versions\//);
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${confirm.body.version.id}/download`);
    assert.is(await (await fetch(dl.body.download_url)).text(), "legacy bytes");
  });

  s("retrying a confirm is always safe: a plain retry and a forced one answer the version it created", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    for (const force of [false, true]) {
      const up = await uploadOnly(svc, e, { base: (await svc.rest.get(`/api/entities/${e}/versions?page_size=1`)).body.versions[0].id, force });
      const body = {
        storage_path: up.res.body.storage_path,
        version: up.version,
        source_hash: force ? v1.source_hash : up.sourceHash,
        file_size_bytes: Buffer.byteLength(up.content),
        base_version_id: (await svc.rest.get(`/api/entities/${e}/versions?page_size=1`)).body.versions[0].id,
        force,
      };
      const first = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
      assert.is(first.status, 201, JSON.stringify(first.body));
      // The answer was lost: the client sends the same confirm again (its base is no longer the tip).
      const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
      assert.is(retry.status, 200, `force ${force}: ${JSON.stringify(retry.body)}`);
      assert.equal([retry.body.created, retry.body.already_confirmed, retry.body.version.id], [false, true, first.body.version.id]);
      assert.is(first.body.already_confirmed, false);
    }
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 3);
  });

  s("a used upload makes no other push: a confirm of it naming another source hash, or forcing another version string or size, is refused; the same source without force is answered its version (spec 4.2 rule 2)", async ({ svc }) => {
    const e = newEntityId();
    const p = await push(svc, e);
    const v = p.confirm!.body.version;
    const same = { storage_path: p.res.body.storage_path, version: p.version, source_hash: p.sourceHash, file_size_bytes: v.file_size_bytes };
    for (const other of [{ source_hash: newSourceHash() }, { version: nextVersionString(), force: true }, { file_size_bytes: v.file_size_bytes + 1, force: true }]) {
      const r = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...same, ...other, base_version_id: v.id });
      assert.equal([r.status, r.body.code], [409, "UPLOAD_ALREADY_CONFIRMED"], JSON.stringify(r.body));
      assert.match(r.body.error, `already made version "${v.id}"`);
    }
    // "Re-confirming a version that is already published (same source hash, force not true) returns 200 with the existing version, not 409."
    // Its own upload's version: already_confirmed, as for a retry that rebuilt its request (a new version string).
    for (const other of [{ version: nextVersionString() }, { file_size_bytes: v.file_size_bytes + 1 }]) {
      const r = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...same, ...other, base_version_id: v.id });
      assert.equal([r.status, r.body.created, r.body.already_confirmed, r.body.version.id, r.body.version.is_active], [200, false, true, v.id, false], JSON.stringify(r.body));
    }
    // Asking to activate it: the used upload cannot record that, a fresh upload of the source can.
    const activating = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...same, version: nextVersionString(), set_as_active: true });
    assert.equal([activating.status, activating.body.code], [409, "UPLOAD_ALREADY_CONFIRMED"], JSON.stringify(activating.body));
    // The newest version of the source, as deduplication answers it.
    const forced = await push(svc, e, { sourceHash: p.sourceHash, base: v.id, force: true });
    assert.is(forced.confirm!.status, 201);
    const newest = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...same, version: nextVersionString() });
    assert.equal([newest.status, newest.body.version.id, newest.body.already_confirmed], [200, forced.confirm!.body.version.id, false], JSON.stringify(newest.body));
    const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, same);
    assert.equal([retry.status, retry.body.version.id], [200, v.id], "the same confirm again is still a retry");
    assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.length, 2);
  });

  s("a retried confirm with set_as_active changes nothing: an activation made since its first answer stays", async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content), set_as_active: true };
    const first = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([first.status, first.body.version.is_active], [201, true]);
    // Its answer was lost; meanwhile another deployer pushed and activated a newer version.
    const v2 = (await push(svc, e, { base: first.body.version.id, setAsActive: true })).confirm!.body.version;
    const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events.length;
    const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([retry.status, retry.body.created, retry.body.version.id, retry.body.version.is_active], [200, false, first.body.version.id, false], JSON.stringify(retry.body));
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v2.id, "the later activation stays");
    assert.is((await svc.rest.get(`/api/entities/${e}/events`)).body.events.length, events, "the retry records nothing");
  });

  s("a confirm refused after its copy was made leaves nothing a later confirm of that upload could take: the version serves the bytes it was confirmed with", async ({ svc }) => {
    const store = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
    const md5 = (bytes: string) => createHash("md5").update(bytes).digest("base64");
    for (let round = 0; round < 4; round++) {
      const e = newEntityId();
      const v0 = (await push(svc, e)).confirm!.body.version;
      // Two pushes on one base, contents of one size, confirmed at once: one wins, the other is STALE_BASE.
      const ups = await Promise.all(["racer-one-AAAA", "racer-two-BBBB"].map((content) => uploadOnly(svc, e, { base: v0.id, content })));
      const body = (u: (typeof ups)[number], base: string, content = u.content, sourceHash = u.sourceHash) => ({
        storage_path: u.res.body.storage_path,
        version: u.version,
        source_hash: sourceHash,
        file_size_bytes: Buffer.byteLength(content),
        base_version_id: base,
      });
      const confirms = await Promise.all(ups.map((u) => svc.rest.post(`/api/entities/${e}/versions/confirm`, body(u, v0.id))));
      assert.equal(confirms.map((c) => c.status).sort(), [201, 409], JSON.stringify(confirms.map((c) => c.body)));
      const winner = confirms.find((c) => c.status === 201)!.body.version;
      const loser = ups[confirms.findIndex((c) => c.status === 409)]!;
      // Deleted while the refusal is answered: give it a moment.
      const copies = async () => {
        const names: string[] = [];
        for await (const blob of store.list(`versions/${e}/`)) names.push(blob.name);
        return names.sort();
      };
      const kept = [v0.storage_path, winner.storage_path].sort();
      for (let waited = 0; JSON.stringify(await copies()) !== JSON.stringify(kept) && waited < 5_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(await copies(), kept, "a refused confirm's copy is not left behind");
      // The loser rebases: new bytes of the same size to its (still valid) upload URL, confirmed on the new tip.
      const rebased = "rebased-CCCCCC";
      assert.is(await putBlob(loser.res.body.upload_url, rebased, loser.res.body.upload_headers), 201);
      const again = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body(loser, winner.id, rebased, createHash("sha256").update(rebased).digest("hex")));
      assert.is(again.status, 201, JSON.stringify(again.body));
      const dl = await svc.rest.get(`/api/entities/${e}/versions/${again.body.version.id}/download`);
      assert.is(await (await fetch(dl.body.download_url)).text(), rebased, "the version serves the bytes it was confirmed with");
      assert.is(dl.body.version.package_md5, md5(rebased));
      const first = await svc.rest.get(`/api/entities/${e}/versions/${winner.id}/download`);
      assert.is(await (await fetch(first.body.download_url)).text(), ups.find((u) => u.sourceHash === winner.source_hash)!.content);
    }
  });

  s("confirms of one upload sent at once all answer its one version (none is UPLOAD_NOT_FOUND)", async ({ svc }) => {
    for (let round = 0; round < 3; round++) {
      const e = newEntityId();
      const up = await uploadOnly(svc, e);
      const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content) };
      const confirms = await Promise.all(Array.from({ length: 6 }, () => svc.rest.post(`/api/entities/${e}/versions/confirm`, body)));
      assert.equal(confirms.map((c) => c.status).sort(), [200, 200, 200, 200, 200, 201], JSON.stringify(confirms.map((c) => c.body.code ?? c.status)));
      assert.is(new Set(confirms.map((c) => c.body.version.id)).size, 1);
      assert.equal(confirms.map((c) => c.body.already_confirmed).sort(), [false, true, true, true, true, true], "each but the one that created it is a retry");
    }
  });

  s("a deduplicated confirm with set_as_active makes the existing version active", async ({ svc }) => {
    const e = newEntityId();
    const content = "the same source";
    const hash = createHash("sha256").update(content).digest("hex");
    const v1 = (await push(svc, e, { sourceHash: hash, content })).confirm!.body.version;
    assert.is(v1.is_active, false);
    // A second upload of the same source (upload-url forced, to get URLs), confirmed with set_as_active.
    const again = await push(svc, e, { sourceHash: hash, content, base: v1.id, setAsActive: true, force: false, uploadForce: true });
    assert.is(again.confirm!.status, 200, JSON.stringify(again.confirm!.body));
    assert.equal([again.confirm!.body.created, again.confirm!.body.already_confirmed, again.confirm!.body.version.id, again.confirm!.body.version.is_active], [false, false, v1.id, true]);
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v1.id);
  });

  s("the retry of a deduplicated confirm with set_as_active changes nothing: an activation made since its first answer stays", async ({ svc }) => {
    const e = newEntityId();
    const content = "the same source";
    const hash = createHash("sha256").update(content).digest("hex");
    const v1 = (await push(svc, e, { sourceHash: hash, content })).confirm!.body.version;
    const up = await uploadOnly(svc, e, { sourceHash: hash, content, base: v1.id, uploadForce: true });
    const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: hash, file_size_bytes: Buffer.byteLength(content), base_version_id: v1.id, set_as_active: true };
    const first = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([first.status, first.body.created, first.body.version.id, first.body.version.is_active], [200, false, v1.id, true]);
    // Its answer lost, the client retries after someone activated a newer version.
    const v2 = (await push(svc, e, { base: v1.id, setAsActive: true })).confirm!.body.version;
    const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events.length;
    const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([retry.status, retry.body.created, retry.body.version.id, retry.body.version.is_active], [200, false, v1.id, false]);
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v2.id, "the later activation stays");
    assert.is((await svc.rest.get(`/api/entities/${e}/events`)).body.events.length, events, "the retry records nothing");
  });

  s("a confirm that made a duplicate active has used its upload: its retry activates no newer duplicate, and creates nothing once the duplicate is deleted", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const content = "the same new source";
    const hash = createHash("sha256").update(content).digest("hex");
    // A uploads; B pushes the same source first; A's confirm, asking for activation, is answered with B's version.
    const a = await uploadOnly(svc, e, { sourceHash: hash, content, base: v1.id });
    const v2 = (await push(svc, e, { sourceHash: hash, content, base: v1.id })).confirm!.body.version;
    const body = { storage_path: a.res.body.storage_path, version: a.version, source_hash: hash, file_size_bytes: Buffer.byteLength(content), base_version_id: v1.id, set_as_active: true };
    const first = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([first.status, first.body.created, first.body.version.id, first.body.version.is_active], [200, false, v2.id, true]);
    // A's answer is lost. An operator rolls back and forces a push of the same source.
    assert.is((await svc.rest.put(`/api/entities/${e}/active-version`, { version_id: v1.id })).status, 200);
    const v3 = (await push(svc, e, { sourceHash: hash, content, base: v2.id, force: true })).confirm!.body.version;
    const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events.length;
    const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([retry.status, retry.body.created, retry.body.version.id, retry.body.version.is_active], [200, false, v3.id, false]);
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v1.id, "the rollback stays");
    // Both duplicates deleted: the retry would otherwise publish and activate its upload anew.
    for (const v of [v3, v2]) assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v.id}`)).status, 200);
    const again = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.equal([again.status, again.body.code], [400, "UPLOAD_NOT_FOUND"], JSON.stringify(again.body));
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v1.id, "the rollback stays");
    assert.is((await svc.rest.get(`/api/entities/${e}/events`)).body.events.length, events + 2, "the retries record nothing; the deletes one event each");
    const listed = (await svc.rest.get(`/api/entities/${e}/versions`)).body.versions.map((v: { id: string }) => v.id);
    assert.equal(listed, [v1.id]);
  });

  s("a deduplicated confirm that would activate needs an upload this service issued, which records it: else UPLOAD_NOT_FOUND and nothing changes", async ({ svc }) => {
    const e = newEntityId();
    const content = "the same source";
    const hash = createHash("sha256").update(content).digest("hex");
    const v1 = (await push(svc, e, { sourceHash: hash, content })).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id, setAsActive: true })).confirm!.body.version;
    // A path of the staging area's shape, and one of the layout before it, that no upload-url issued.
    for (const storagePath of [`uploads/${e}/11111111-2222-4333-8444-555555555555/package`, `${e}/11111111-2222-4333-8444-555555555555/package`]) {
      const body = { storage_path: storagePath, version: nextVersionString(), source_hash: hash, file_size_bytes: Buffer.byteLength(content), base_version_id: v2.id };
      const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events.length;
      const activating = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...body, set_as_active: true });
      assert.equal([activating.status, activating.body.code], [400, "UPLOAD_NOT_FOUND"], storagePath);
      assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v2.id, "the active version stays");
      assert.is((await svc.rest.get(`/api/entities/${e}/events`)).body.events.length, events, "nothing is recorded");
      // Without set_as_active it is answered the existing version, as upload-url would have.
      const plain = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
      assert.equal([plain.status, plain.body.created, plain.body.version.id], [200, false, v1.id], storagePath);
    }
  });

  s("racing uploads of the same new source, confirmed with set_as_active: one version, and it is active", async ({ svc }) => {
    const e = newEntityId();
    const v0 = (await push(svc, e)).confirm!.body.version;
    const content = "raced source";
    const hash = createHash("sha256").update(content).digest("hex");
    const uploads = await Promise.all([1, 2, 3, 4].map(() => uploadOnly(svc, e, { sourceHash: hash, content, base: v0.id })));
    const confirms = await Promise.all(
      uploads.map((u, i) =>
        svc.rest.post(`/api/entities/${e}/versions/confirm`, {
          storage_path: u.res.body.storage_path,
          version: u.version,
          source_hash: hash,
          file_size_bytes: Buffer.byteLength(content),
          base_version_id: v0.id,
          set_as_active: i % 2 === 1,
        }),
      ),
    );
    assert.is(confirms.filter((c) => c.status === 201).length, 1, JSON.stringify(confirms.map((c) => [c.status, c.body.code])));
    const ids = new Set(confirms.map((c) => c.body.version?.id));
    assert.is(ids.size, 1, "every confirm answers the one version");
    const active = await svc.rest.get(`/api/entities/${e}/active-version`);
    assert.is(active.body.id, [...ids][0], "a confirm that asked for activation got it, whichever created the version");
  });

  s("a confirm is answered once its version is recorded: a slow delete of the staged upload never makes it DEADLINE_EXCEEDED", async () => {
    const svc = await startService(backend, {
      env: { REQUEST_DEADLINE_MS: "1000" },
      blobStore: (store) =>
        blobStoreWith(store, {
          deleteIfExists: async (path, signal) => {
            await sleep(2_500);
            return store.deleteIfExists(path, signal);
          },
        }),
    });
    try {
      const e = newEntityId();
      const p = await push(svc, e, { lockfile: '{"lock":1}' });
      assert.equal([p.confirm!.status, p.confirm!.body.created], [201, true], JSON.stringify(p.confirm!.body));
      const store = new AzureBlobStore({ connectionString: svc.env["AZURE_STORAGE_CONNECTION_STRING"]!, container: svc.env["AZURE_STORAGE_CONTAINER"]! });
      assert.ok(await blobGone(store, p.res.body.storage_path, 10_000), "the staged package is deleted all the same");
      assert.ok(await blobGone(store, p.res.body.package_lock_path, 10_000), "the staged lockfile is deleted all the same");
    } finally {
      await svc.close();
    }
  });

  s("an entity has at most MAX_OPEN_UPLOADS_PER_ENTITY uploads issued and not confirmed: past it upload-url is RESOURCE_EXHAUSTED, until one is confirmed", async () => {
    const svc = await startService(backend, { env: { MAX_OPEN_UPLOADS_PER_ENTITY: "3" } });
    try {
      const e = newEntityId();
      const first = await push(svc, e);
      assert.is(first.confirm!.status, 201, "a confirmed upload is not open");
      const base = first.confirm!.body.version.id as string;
      const open = [];
      for (let i = 0; i < 3; i++) open.push(await uploadOnly(svc, e, { base }));
      assert.equal(open.map((u) => u.res.status), [200, 200, 200]);
      const over = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: newSourceHash(), base_version_id: base });
      assert.equal([over.status, over.body.code], [429, "TOO_MANY_OPEN_UPLOADS"], JSON.stringify(over.body));
      assert.match(over.body.error, `You already have 3 uploads of entity "${e}" issued and not confirmed (MAX_OPEN_UPLOADS_PER_ENTITY, counted per caller)`);
      const grpc = await svc.grpc.call("GetUploadUrl", { entity_id: e, version: nextVersionString(), source_hash: newSourceHash(), base_version_id: base });
      assert.ok(!grpc.ok && grpc.error.code === 8 && grpc.error.reason === "TOO_MANY_OPEN_UPLOADS" && grpc.error.metadata["limit"] === "3", JSON.stringify(grpc));
      // Published source is still answered: no upload is issued for it.
      const dedup = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), source_hash: first.sourceHash });
      assert.equal([dedup.status, dedup.body.existing_version?.id], [200, base]);
      // Another entity has its own count.
      assert.is((await uploadOnly(svc, newEntityId())).res.status, 200);
      // Confirming one of them frees its place.
      const u = open[0]!;
      const confirmed = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
        storage_path: u.res.body.storage_path,
        version: u.version,
        source_hash: u.sourceHash,
        file_size_bytes: Buffer.byteLength(u.content),
        base_version_id: base,
      });
      assert.is(confirmed.status, 201, JSON.stringify(confirmed.body));
      const again = await uploadOnly(svc, e, { base: confirmed.body.version.id });
      assert.is(again.res.status, 200, JSON.stringify(again.res.body));
    } finally {
      await svc.close();
    }
  });

  s("MAX_OPEN_UPLOADS_PER_ENTITY counts each caller's own uploads: another publisher's open uploads neither block the first push of an unclaimed id nor count against its owner", async () => {
    const svc = await startService(backend, { env: { MAX_OPEN_UPLOADS_PER_ENTITY: "3" } });
    try {
      const mallory = { rest: svc.restAs(bearer(await token({ sub: "mallory", roles: ["publisher"] }))) };
      const alice = { rest: svc.restAs(bearer(await token({ sub: "alice", roles: ["publisher"] }))) };
      // Any publisher may ask for upload URLs for an id no one has claimed.
      const free = newEntityId();
      for (let i = 0; i < 3; i++) assert.is((await uploadOnly(mallory, free)).res.status, 200);
      const first = await push(alice, free);
      assert.is(first.res.status, 200, `the rightful first push is not refused for another's uploads: ${JSON.stringify(first.res.body)}`);
      assert.is(first.confirm!.status, 201, JSON.stringify(first.confirm!.body));
      // Claimed with mallory's two uploads still open: alice has her own three.
      const claimed = newEntityId();
      for (let i = 0; i < 2; i++) assert.is((await uploadOnly(mallory, claimed)).res.status, 200);
      const base = (await push(alice, claimed)).confirm!.body.version.id as string;
      for (let i = 0; i < 3; i++) {
        const u = await uploadOnly(alice, claimed, { base });
        assert.is(u.res.status, 200, `upload ${i + 1} of alice's own three: ${JSON.stringify(u.res.body)}`);
      }
      const over = await uploadOnly(alice, claimed, { base });
      assert.equal([over.res.status, over.res.body.code], [429, "TOO_MANY_OPEN_UPLOADS"], "her own are still bounded");
    } finally {
      await svc.close();
    }
  });

  s("the most service_dependencies the settings allow (992 slugs of 63 characters) are stored and read back whole", async () => {
    const svc = await startService(backend, { env: { MAX_SERVICE_DEPENDENCIES: "992" } });
    try {
      const slugs = Array.from({ length: 992 }, (_, i) => `s${String(i).padStart(3, "0")}-${"a".repeat(58)}`);
      assert.is(slugs[0]!.length, 63);
      const e = newEntityId();
      const p = await push(svc, e, { extra: { service_dependencies: slugs } });
      assert.is(p.confirm!.status, 201, JSON.stringify(p.confirm!.body).slice(0, 300));
      const read = await svc.rest.get(`/api/entities/${e}/versions/${p.confirm!.body.version.id}`);
      assert.equal(read.body.service_dependencies, slugs);
    } finally {
      await svc.close();
    }
  });

  s("an upload that keeps changing while it is confirmed is 409 UPLOAD_CHANGED, and nothing is recorded", async () => {
    const svc = await startService(backend, {
      // The staged package changes between its check and its copy, every time.
      blobStore: (store) => blobStoreWith(store, { copyOnce: async () => "source-changed" }),
    });
    try {
      const e = newEntityId();
      const p = await push(svc, e);
      assert.equal([p.confirm!.status, p.confirm!.body.code], [409, "UPLOAD_CHANGED"]);
      assert.is(p.confirm!.headers.get("retry-after"), "1");
      assert.is((await svc.rest.get(`/api/entities/${e}/versions`)).body.code, "ENTITY_NOT_FOUND", "not even the entity was made");
    } finally {
      await svc.close();
    }
  });

  s("bad input is 400 INVALID_ARGUMENT naming the field", async ({ svc }) => {
    const e = newEntityId();
    const good = { version: nextVersionString(), source_hash: newSourceHash() };
    const cases: Array<[string, unknown, string]> = [
      [`/api/entities/${e}/versions/upload-url`, { ...good, version: "2026.02.30-120000" }, "version"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, version: "" }, "version"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, source_hash: good.source_hash.toUpperCase() }, "source_hash"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, source_hash: "abc" }, "source_hash"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, base_version_id: "has space" }, "base_version_id"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, force: "yes" }, "force"],
      [`/api/entities/${e}/versions/upload-url`, { ...good, colour: "red" }, "colour"],
      [`/api/entities/bad.entity/versions/upload-url`, good, "entity_id"],
      [`/api/entities/${"x".repeat(129)}/versions/upload-url`, good, "entity_id"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 0 }, "file_size_bytes"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: -5 }, "file_size_bytes"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 1e12 }, "file_size_bytes"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 1.5 }, "file_size_bytes"],
      // proto3 JSON: an integer in a string is decimal digits, not whatever JavaScript would make of it.
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: "0x6" }, "file_size_bytes"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, fileSizeBytes: "6 " }, "file_size_bytes"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 3, service_dependencies: ["Not A Slug"] }, "service_dependencies"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 3, service_dependencies: ["a", "a"] }, "service_dependencies"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 3, package_json: [1, 2] }, "package_json"],
      // Too deep for binary clients to decode once stored, and too many values to serve cheaply.
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 3, package_json: nested(33) }, "package_json"],
      [`/api/entities/${e}/versions/confirm`, { ...good, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, file_size_bytes: 3, package_json: { a: Array(10_000).fill(0) } }, "package_json"],
      [`/api/entities/${e}/versions/confirm`, { ...good, file_size_bytes: 3 }, "storage_path"],
    ];
    for (const [path, body, field] of cases) {
      const r = await svc.rest.post(path, body);
      assert.is(r.status, 400, `${field}: ${JSON.stringify(r.body)}`);
      assert.is(r.body.code, "INVALID_ARGUMENT", field);
      assert.ok(r.body.error.includes(field), `${field} not named in: ${r.body.error}`);
    }
  });

  s("a package_json number JSON cannot hold (1e400) is 400 naming it, and nothing is recorded", async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const good = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content) };
    const raw = JSON.stringify({ ...good, package_json: { deps: [1, { n: "x" }] } }).replace('"x"', "1e400");
    const r = await svc.rest.post(`/api/entities/${e}/versions/confirm`, raw);
    assert.is(r.status, 400, JSON.stringify(r.body));
    assert.is(r.body.code, "INVALID_ARGUMENT");
    assert.match(r.body.error, "package_json.deps[1].n");
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.ok(list.body.code === "ENTITY_NOT_FOUND" || list.body.versions.length === 0, JSON.stringify(list.body));
    const fine = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { ...good, package_json: { n: 1e300 } });
    assert.is(fine.status, 201, JSON.stringify(fine.body));
    assert.equal(fine.body.version.package_json, { n: 1e300 });
  });

  s("a package_json that would not read back as sent (bytes not UTF-8, another charset, a lone surrogate, an integer JSON rounds) is refused, and nothing is recorded", async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const good = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content) };
    const url = `${svc.url}/api/entities/${e}/versions/confirm`;
    const auth = svc.rest.defaultHeaders["authorization"]!;
    const send = async (body: Buffer | string, contentType = "application/json") => {
      const res = await fetch(url, { method: "POST", headers: { authorization: auth, "content-type": contentType }, body });
      return { status: res.status, body: (await res.json()) as { code: string; error: string } };
    };
    const json = JSON.stringify({ ...good, package_json: { name: "café" } });
    // "é" as Latin-1: one byte that is not UTF-8.
    const latin1 = Buffer.from(json, "latin1");
    const notUtf8 = await send(latin1);
    assert.equal([notUtf8.status, notUtf8.body.code], [400, "MALFORMED_REQUEST"]);
    assert.match(notUtf8.body.error, "the body is not UTF-8: send JSON encoded in UTF-8");
    const charset = await send(latin1, "application/json; charset=iso-8859-1");
    assert.equal([charset.status, charset.body.code], [415, "UNSUPPORTED_MEDIA_TYPE"]);
    const surrogate = await send(JSON.stringify({ ...good, package_json: { name: "x" } }).replace('"x"', '"\\ud800"'));
    assert.equal([surrogate.status, surrogate.body.code], [400, "INVALID_ARGUMENT"]);
    assert.match(surrogate.body.error, "package_json.name holds a lone UTF-16 surrogate");
    const big = await send(JSON.stringify({ ...good, package_json: { big: 1 } }).replace('"big":1', '"big":12345678901234567890'));
    assert.equal([big.status, big.body.code], [400, "MALFORMED_REQUEST"]);
    assert.match(big.body.error, 'the number 12345678901234567890 is an integer beyond 2^53, which a JSON number holds only rounded (it would be read as 12345678901234567000): send it as a string, "12345678901234567890"');
    // Connect's JSON is read by Connect; the lone surrogate is refused there too, by the same validation.
    const viaConnect = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/ConfirmUpload`, {
      method: "POST",
      headers: { authorization: auth, "content-type": "application/json", "connect-protocol-version": "1" },
      body: JSON.stringify({ entityId: e, storagePath: good.storage_path, version: good.version, sourceHash: good.source_hash, fileSizeBytes: String(good.file_size_bytes), packageJson: { name: "x" } }).replace('"x"', '"\\udc00"'),
    });
    assert.is(viaConnect.status, 400);
    assert.match(((await viaConnect.json()) as { message: string }).message, "lone UTF-16 surrogate");
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.ok(list.body.code === "ENTITY_NOT_FOUND" || list.body.versions.length === 0, JSON.stringify(list.body));
    const fine = await send(Buffer.from(json, "utf8"), "application/json; charset=UTF-8");
    assert.is(fine.status, 201, JSON.stringify(fine.body));
    assert.equal((fine.body as unknown as { version: { package_json: unknown } }).version.package_json, { name: "café" });
  });

  s('a package_json with a "__proto__" key, or "constructor" holding "prototype", is refused on Connect and gRPC as REST refuses it, and nothing is recorded', async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const good = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content) };
    const auth = svc.rest.defaultHeaders["authorization"]!;
    // JSON text: an object literal's "__proto__" would set the prototype, not a key.
    const poisoned = ['{"__proto__":{"x":1}}', '{"deps":[{"a":{"constructor":{"prototype":{"x":1}}}}]}'];
    for (const manifest of poisoned) {
      const rest = await svc.rest.post(`/api/entities/${e}/versions/confirm`, JSON.stringify(good).replace(/}$/, `,"package_json":${manifest}}`));
      assert.equal([rest.status, rest.body.code], [400, "MALFORMED_REQUEST"], JSON.stringify(rest.body));
      const connect = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/ConfirmUpload`, {
        method: "POST",
        headers: { authorization: auth, "content-type": "application/json", "connect-protocol-version": "1" },
        body: `{"entityId":"${e}","storagePath":"${good.storage_path}","version":"${good.version}","sourceHash":"${good.source_hash}","fileSizeBytes":"${good.file_size_bytes}","packageJson":${manifest}}`,
      });
      const answer = (await connect.json()) as { code: string; message: string };
      assert.equal([connect.status, answer.code], [400, "invalid_argument"], `${manifest}: ${JSON.stringify(answer)}`);
      assert.match(answer.message, "package_json");
      assert.match(answer.message, manifest.includes("__proto__") ? 'package_json has a "__proto__" key' : 'package_json.deps[0].a has a "constructor" key holding "prototype"');
      assert.match(answer.message, "remove it");
    }
    // grpc-js writes a Struct from its fields object (where "__proto__" is no key): "constructor" goes through.
    const grpcPoisoned = await svc.grpc.call("ConfirmUpload", {
      entity_id: e,
      ...good,
      package_json: { fields: { constructor: { structValue: { fields: { prototype: { numberValue: 1 } } } } } },
    });
    assert.ok(!grpcPoisoned.ok && grpcPoisoned.error.code === 3, JSON.stringify(grpcPoisoned));
    assert.match(grpcPoisoned.error.message, 'package_json has a "constructor" key holding "prototype"');
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.ok(list.body.code === "ENTITY_NOT_FOUND" || list.body.versions.length === 0, JSON.stringify(list.body));
    // Only the pair REST refuses: a "constructor" without "prototype", or "prototype" alone, is a key like any other.
    const fine = await svc.grpc.call<{ version: { package_json: unknown } }>("ConfirmUpload", {
      entity_id: e,
      ...good,
      package_json: { fields: { constructor: { stringValue: "x" }, prototype: { structValue: { fields: { constructor: { numberValue: 1 } } } } } },
    });
    assert.ok(fine.ok, JSON.stringify(fine));
    const stored = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(stored.body.versions[0].package_json, { constructor: "x", prototype: { constructor: 1 } });
  });

  s("JSON that is not UTF-8 is refused on every RPC protocol as on REST, never read with U+FFFD in its place: Connect (plain, gzip, GET), gRPC and gRPC-Web JSON", async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const auth = svc.rest.defaultHeaders["authorization"]!;
    // An overlong "/" (C0 AF) after a byte no UTF-8 has (FF).
    const bad = Buffer.from([0xff, 0xc0, 0xaf]);
    const withBad = (json: string) => Buffer.concat(json.split("BAD").flatMap((part, i) => (i === 0 ? [Buffer.from(part)] : [bad, Buffer.from(part)])));
    const confirm = (name: string) =>
      withBad(JSON.stringify({ entityId: e, storagePath: up.res.body.storage_path, version: up.version, sourceHash: up.sourceHash, fileSizeBytes: String(Buffer.byteLength(up.content)), packageJson: { name } }));
    const rpc = (method: string) => `${svc.url}/entityversions.v1.EntityVersionsService/${method}`;
    const refusal = "The request could not be read: a request message is not UTF-8: send JSON encoded in UTF-8";
    const connect = async (body: Buffer, headers: Record<string, string> = {}) => {
      const res = await fetch(rpc("ConfirmUpload"), { method: "POST", headers: { authorization: auth, "content-type": "application/json", "connect-protocol-version": "1", ...headers }, body });
      return { status: res.status, body: (await res.json()) as { code: string; message: string } };
    };
    for (const [label, answer] of [
      ["Connect JSON", await connect(confirm("xBAD"))],
      ["Connect JSON, gzip", await connect(gzipSync(confirm("xBAD")), { "content-encoding": "gzip" })],
    ] as const) {
      assert.equal([answer.status, answer.body.code], [400, "invalid_argument"], `${label}: ${JSON.stringify(answer.body)}`);
      assert.match(answer.body.message, refusal, label);
    }
    const getMessage = withBad(JSON.stringify({ entityId: "proBADbe1" }));
    for (const query of [`message=${[...getMessage].map((b) => `%${b.toString(16).padStart(2, "0")}`).join("")}`, `message=${getMessage.toString("base64url")}&base64=1`]) {
      const res = await fetch(`${rpc("GetActiveVersion")}?encoding=json&connect=v1&${query}`, { headers: { authorization: auth } });
      const body = (await res.json()) as { code: string; message: string };
      assert.equal([res.status, body.code], [400, "invalid_argument"], `GET ${query}: ${JSON.stringify(body)}`);
      assert.match(body.message, refusal, query);
    }
    const envelope = (flags: number, payload: Buffer) => {
      const prefix = Buffer.alloc(5);
      prefix[0] = flags;
      prefix.writeUInt32BE(payload.length, 1);
      return Buffer.concat([prefix, payload]);
    };
    for (const [label, headers, body] of [
      ["gRPC JSON", {}, envelope(0, confirm("xBAD"))],
      ["gRPC JSON, gzip", { "grpc-encoding": "gzip" }, envelope(1, gzipSync(confirm("xBAD")))],
    ] as const) {
      const answer = await rawGrpc(svc.url, "/entityversions.v1.EntityVersionsService/ConfirmUpload", body, { authorization: auth, "content-type": "application/grpc+json", ...headers });
      const status = answer.trailers["grpc-status"] ?? answer.headers["grpc-status"];
      const message = decodeURIComponent(String(answer.trailers["grpc-message"] ?? answer.headers["grpc-message"]));
      assert.equal([status, message.startsWith(refusal)], ["3", true], `${label}: ${status} ${message}`);
    }
    const web = await fetch(rpc("ConfirmUpload"), { method: "POST", headers: { authorization: auth, "content-type": "application/grpc-web+json", "x-grpc-web": "1" }, body: envelope(0, confirm("xBAD")) });
    const webText = Buffer.from(await web.arrayBuffer()).toString("latin1");
    assert.is(web.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(webText)?.[1], "3", webText);
    assert.match(decodeURIComponent(web.headers.get("grpc-message") ?? /grpc-message: ?(.*)\r/.exec(webText)?.[1] ?? ""), refusal);
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.ok(list.body.code === "ENTITY_NOT_FOUND" || list.body.versions.length === 0, JSON.stringify(list.body));
    // UTF-8 goes through.
    const fine = await connect(confirm("café ☕"));
    assert.is(fine.status, 200, JSON.stringify(fine.body));
    assert.equal((fine.body as unknown as { version: { packageJson: unknown } }).version.packageJson, { name: "café ☕" });
  });

  s("a package_json as deep as allowed (32 levels) is read back by binary clients: grpc-js lists and gets it", async ({ svc }) => {
    const e = newEntityId();
    const deep = nested(32);
    const v = (await push(svc, e, { extra: { package_json: deep } })).confirm!.body.version;
    const got = await svc.grpc.call<{ version: { package_json: unknown } }>("GetVersion", { entity_id: e, version_id: v.id });
    assert.ok(got.ok, JSON.stringify(got));
    const listed = await svc.grpc.call<{ versions: unknown[] }>("ListVersions", { entity_id: e });
    assert.ok(listed.ok && listed.value.versions.length === 1, JSON.stringify(listed).slice(0, 300));
    assert.equal((await svc.rest.get(`/api/entities/${e}/versions/${v.id}`)).body.package_json, deep);
  });

  s("lowerCamelCase names are accepted as well as snake_case", async ({ svc }) => {
    const e = newEntityId();
    const up = await uploadOnly(svc, e);
    const r = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storagePath: up.res.body.storage_path,
      version: up.version,
      sourceHash: up.sourceHash,
      fileSizeBytes: Buffer.byteLength(up.content),
      setAsActive: true,
      serviceDependencies: ["x"],
      packageJson: { a: 1 },
    });
    assert.is(r.status, 201);
    assert.is(r.body.version.is_active, true);
    assert.equal(r.body.version.service_dependencies, ["x"]);
    const camelUp = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: nextVersionString(), sourceHash: newSourceHash(), baseVersionId: r.body.version.id });
    assert.is(camelUp.status, 200);
    assert.type(camelUp.body.upload_url, "string");
  });

  s("the upload URL works with a plain PUT and cannot touch another blob or read", async ({ svc }) => {
    const e = newEntityId();
    const { res } = await uploadOnly(svc, e, { content: "the package" });
    const url = new URL(res.body.upload_url);
    assert.is(await putBlob(res.body.upload_url, "the package, again", res.body.upload_headers), 201);
    assert.is((await fetch(url)).status, 403);
    const other = new URL(url);
    other.pathname = other.pathname.replace(/package$/, "evil");
    assert.is(await putBlob(other.toString(), "x", res.body.upload_headers), 403);
    const sibling = new URL(url);
    sibling.pathname = sibling.pathname.replace(/[0-9a-f-]{36}\/package$/, "00000000-0000-4000-8000-000000000000/package");
    assert.is(await putBlob(sibling.toString(), "x", res.body.upload_headers), 403);
    const tampered = new URL(url);
    tampered.searchParams.set("se", "2099-01-01T00:00:00Z");
    assert.is(await putBlob(tampered.toString(), "x", res.body.upload_headers), 403);
  });
  return s;
}

/** A JSON object nested `depth` levels deep ({"a": {"a": … {}}}: `depth` values, `depth` deep). */
function nested(depth: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let i = 1; i < depth; i++) value = { a: value };
  return value;
}

import * as assert from "uvu/assert";
import { AzureBlobStore } from "../../src/blob/azure-blob-store.js";
import type { Backend } from "../support/env.js";
import { blobGone, newEntityId, push } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

/** Spec 4.6 and the state table: deleting versions and their blobs. */
export function deleteSuite(backend: Backend) {
  const s = serviceSuite("delete: records, blobs, the active version, the tip", backend);

  const blobs = (env: Readonly<Record<string, string>>) =>
    new AzureBlobStore({ connectionString: env["AZURE_STORAGE_CONNECTION_STRING"]!, container: env["AZURE_STORAGE_CONTAINER"]! });

  s("the active version cannot be deleted", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const r = await svc.rest.delete(`/api/entities/${e}/versions/${v.id}`);
    assert.is(r.status, 400);
    assert.equal(Object.keys(r.body).sort(), ["code", "error"]);
    assert.is(r.body.code, "ACTIVE_VERSION_NOT_DELETABLE");
    assert.match(r.body.error, "set another version active first");
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v.id}`)).status, 200);
  });

  s("deleting a version removes its record, its package and its lockfile", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const p2 = await push(svc, e, { base: v1.id, lockfile: "{}" });
    const v2 = p2.confirm!.body.version;
    const store = blobs(svc.env);
    assert.ok((await store.stat(v2.storage_path)) !== undefined);
    assert.ok((await store.stat(v2.package_lock_path)) !== undefined);
    const r = await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`);
    assert.is(r.status, 200);
    assert.equal(r.body, {});
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v2.id}`)).body.code, "VERSION_NOT_FOUND");
    assert.ok(await blobGone(store, v2.storage_path, 5_000), "the package is deleted");
    assert.ok(await blobGone(store, v2.package_lock_path, 5_000), "the lockfile is deleted");
    assert.ok((await store.stat(v1.storage_path)) !== undefined);
    const again = await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`);
    assert.is(again.status, 404);
    assert.is(again.body.code, "VERSION_NOT_FOUND");
    // Its upload cannot be confirmed back into a version.
    const reconfirm = await svc.rest.post(`/api/entities/${e}/versions/confirm`, {
      storage_path: p2.res.body.storage_path,
      version: v2.version,
      source_hash: v2.source_hash,
      file_size_bytes: v2.file_size_bytes,
      base_version_id: v1.id,
    });
    assert.is(reconfirm.status, 400);
    assert.is(reconfirm.body.code, "UPLOAD_NOT_FOUND");
  });

  s("deleting the tip makes the next most recent version the tip", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    const v3 = (await push(svc, e, { base: v2.id })).confirm!.body.version;
    assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v3.id}`)).status, 200);
    const stale = await push(svc, e, { base: v3.id });
    assert.is(stale.res.status, 409);
    assert.is(stale.res.body.latest_version.id, v2.id);
    // Deleting a version below the tip leaves the tip alone.
    assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v2.id}`)).status, 200);
    const onV1 = await push(svc, e, { base: v1.id });
    assert.is(onV1.confirm!.status, 201);
    assert.is(onV1.confirm!.body.version.base_version_id, v1.id);
  });

  s("an entity whose versions are all deleted takes a first push again", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    assert.is((await svc.rest.delete(`/api/entities/${e}/versions/${v1.id}`)).status, 200);
    assert.equal((await svc.rest.get(`/api/entities/${e}/versions`)).body, { versions: [], next_page_token: "" });
    const stale = await push(svc, e, { base: v1.id });
    assert.is(stale.res.status, 409);
    assert.is(stale.res.body.latest_version, null);
    assert.is((await push(svc, e)).confirm!.status, 201);
  });

  s("unknown entity or version: 404", async ({ svc }) => {
    const e = newEntityId();
    await push(svc, e);
    assert.is((await svc.rest.delete(`/api/entities/${newEntityId()}/versions/x`)).body.code, "ENTITY_NOT_FOUND");
    assert.is((await svc.rest.delete(`/api/entities/${e}/versions/x`)).body.code, "VERSION_NOT_FOUND");
  });

  return s;
}

import * as assert from "uvu/assert";
import { type Backend, connectTestDatabase } from "../support/env.js";
import { newEntityId, push, startService } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, token } from "../support/tokens.js";

/** Spec 4.3 to 4.5 and the added GetVersion and ListVersions, over REST. */
export function readsSuite(backend: Backend) {
  const s = serviceSuite("reads: versions, list, active version, download", backend);

  s("GetVersion returns the version; unknown entity and version are distinct 404s", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const got = await svc.rest.get(`/api/entities/${e}/versions/${v.id}`);
    assert.is(got.status, 200);
    assert.equal(got.body, v);
    const noVersion = await svc.rest.get(`/api/entities/${e}/versions/no-such-version`);
    assert.is(noVersion.status, 404);
    assert.is(noVersion.body.code, "VERSION_NOT_FOUND");
    const noEntity = await svc.rest.get(`/api/entities/${newEntityId()}/versions/${v.id}`);
    assert.is(noEntity.status, 404);
    assert.is(noEntity.body.code, "ENTITY_NOT_FOUND");
  });

  s("GetActiveVersion: NO_ACTIVE_VERSION until one is set, ENTITY_NOT_FOUND for unknown entities", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const none = await svc.rest.get(`/api/entities/${e}/active-version`);
    assert.is(none.status, 404);
    assert.is(none.body.code, "NO_ACTIVE_VERSION");
    assert.equal(Object.keys(none.body).sort(), ["code", "error"]);
    const unknown = await svc.rest.get(`/api/entities/${newEntityId()}/active-version`);
    assert.is(unknown.status, 404);
    assert.is(unknown.body.code, "ENTITY_NOT_FOUND");
    const set = await svc.rest.put(`/api/entities/${e}/active-version`, { versionId: v.id });
    assert.is(set.status, 200);
    assert.equal(set.body, { ...v, is_active: true });
    assert.equal((await svc.rest.get(`/api/entities/${e}/active-version`)).body, { ...v, is_active: true });
  });

  s("SetActiveVersion takes versionId or version_id, is a no-op when repeated, and only takes this entity's versions", async ({ svc }) => {
    const e = newEntityId();
    const other = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    const foreign = (await push(svc, other)).confirm!.body.version;
    assert.is((await svc.rest.put(`/api/entities/${e}/active-version`, { version_id: v1.id })).body.id, v1.id);
    const again = await svc.rest.put(`/api/entities/${e}/active-version`, { versionId: v1.id });
    assert.is(again.status, 200);
    assert.is(again.body.is_active, true);
    assert.is((await svc.rest.put(`/api/entities/${e}/active-version`, { versionId: v2.id })).body.id, v2.id);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v1.id}`)).body.is_active, false);
    const cross = await svc.rest.put(`/api/entities/${e}/active-version`, { versionId: foreign.id });
    assert.is(cross.status, 404);
    assert.is(cross.body.code, "VERSION_NOT_FOUND");
    const missing = await svc.rest.put(`/api/entities/${e}/active-version`, {});
    assert.is(missing.status, 400);
    assert.match(missing.body.error, "version_id");
    // The version string where its id belongs: said so, with where ids come from.
    const byString = await svc.rest.put(`/api/entities/${e}/active-version`, { versionId: v1.version });
    assert.equal([byString.status, byString.body.code], [400, "INVALID_ARGUMENT"]);
    assert.match(byString.body.error, `Invalid version_id: "${v1.version}" is not a version id; that is a version string: pass the version's id, which ListVersions answers`);
    const unknownEntity = await svc.rest.put(`/api/entities/${newEntityId()}/active-version`, { versionId: v1.id });
    assert.is(unknownEntity.body.code, "ENTITY_NOT_FOUND");
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v2.id);
  });

  s("ListVersions pages newest first with signed tokens (AIP-158)", async ({ svc }) => {
    const e = newEntityId();
    const ids: string[] = [];
    let base: string | undefined;
    for (let i = 0; i < 5; i++) {
      const v = (await push(svc, e, base === undefined ? {} : { base })).confirm!.body.version;
      ids.unshift(v.id);
      base = v.id;
    }
    const seen: string[] = [];
    let token = "";
    let pages = 0;
    do {
      // Bounded: a token that never runs out must fail the test, not hang the run.
      if (pages === 10) assert.unreachable(`still a next page after ${pages} pages of 2 (5 versions); seen ${JSON.stringify(seen)}`);
      const page = await svc.rest.get(`/api/entities/${e}/versions?page_size=2${token === "" ? "" : `&page_token=${encodeURIComponent(token)}`}`);
      assert.is(page.status, 200);
      assert.ok(page.body.versions.length <= 2);
      seen.push(...page.body.versions.map((v: { id: string }) => v.id));
      token = page.body.next_page_token;
      pages++;
    } while (token !== "");
    assert.is(pages, 3);
    assert.equal(seen, ids);
    const all = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(all.body.versions.map((v: { id: string }) => v.id), ids);
    assert.is(all.body.next_page_token, "");
    const camel = await svc.rest.get(`/api/entities/${e}/versions?pageSize=1`);
    assert.is(camel.body.versions.length, 1);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions?page_size=5000`)).status, 200);
  });

  s("a page of ListVersions ends at PAGE_MAX_BYTES of package_json, one version at least, and the pages still walk the whole history once", async () => {
    const small = await startService(backend, { env: { PAGE_MAX_BYTES: String(64 * 1024) } });
    try {
      const e = newEntityId();
      const manifest = (bytes: number) => ({ name: "x", notes: "n".repeat(bytes) });
      const ids: string[] = [];
      let base: string | undefined;
      // 30 kB, 30 kB, 30 kB, 100 kB (past the budget alone), 30 kB, 30 kB: newest first.
      for (const bytes of [30_000, 30_000, 100_000, 30_000, 30_000, 30_000]) {
        const v = (await push(small, e, { ...(base === undefined ? {} : { base }), extra: { package_json: manifest(bytes) } })).confirm!.body.version;
        ids.unshift(v.id);
        base = v.id;
      }
      const sizes: number[] = [];
      const seen: string[] = [];
      let token = "";
      do {
        // Bounded: a token that never runs out (a page that reads its last version again) must fail the test, not hang the run.
        if (sizes.length === 10) assert.unreachable(`still a next page after ${sizes.length} pages (6 versions): sizes ${JSON.stringify(sizes)}, seen ${JSON.stringify(seen)}`);
        const page = await small.rest.get(`/api/entities/${e}/versions?page_size=50${token === "" ? "" : `&page_token=${encodeURIComponent(token)}`}`);
        assert.is(page.status, 200, JSON.stringify(page.body).slice(0, 300));
        sizes.push(page.body.versions.length);
        seen.push(...page.body.versions.map((v: { id: string }) => v.id));
        token = page.body.next_page_token;
      } while (token !== "");
      // Three of 30 kB fit in 64 KiB (the third starts at 60 kB); the 100 kB one alone; then the last two.
      assert.equal(sizes, [3, 1, 2]);
      assert.equal(seen, ids);
    } finally {
      await small.close();
    }
  });

  s("a caller without access is refused before any manifest of the entity is parsed", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e, { setAsActive: true, extra: { package_json: { name: "x" } } })).confirm!.body.version;
    // A manifest that would fail to parse: reading it is then visible as a 500.
    const db = connectTestDatabase(backend, svc.db);
    try {
      await db("versions").where("id", v.id).update({ package_json: "{not json" });
    } finally {
      await db.destroy();
    }
    const stranger = svc.restAs(bearer(await token({ sub: "stranger", roles: [] })));
    for (const path of [`/api/entities/${e}/versions`, `/api/entities/${e}/active-version`, `/api/entities/${e}/versions/${v.id}`]) {
      const r = await stranger.get(path);
      assert.equal([r.status, r.body.code], [404, "ENTITY_NOT_FOUND"], path);
    }
  });

  s("ListVersions refuses tampered tokens, tokens of another entity, negative sizes and unknown parameters", async ({ svc }) => {
    const e = newEntityId();
    const other = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    await push(svc, e, { base: v1.id });
    const o1 = (await push(svc, other)).confirm!.body.version;
    await push(svc, other, { base: o1.id });
    const token = (await svc.rest.get(`/api/entities/${e}/versions?page_size=1`)).body.next_page_token as string;
    assert.ok(token.length > 0);
    const forged = Buffer.from(JSON.stringify([e, 999])).toString("base64url");
    const altered = Buffer.from(token, "base64url");
    altered[altered.length - 20]! ^= 1;
    for (const [query, field] of [
      [`page_token=${encodeURIComponent(forged)}`, "page_token"],
      [`page_token=${encodeURIComponent(altered.toString("base64url"))}`, "page_token"],
      [`page_token=garbage`, "page_token"],
      [`page_size=-1`, "page_size"],
      [`page_size=abc`, "page_size"],
      [`colour=red`, "colour"],
    ] as const) {
      const r = await svc.rest.get(`/api/entities/${e}/versions?${query}`);
      assert.is(r.status, 400, query);
      assert.is(r.body.code, "INVALID_ARGUMENT", query);
      assert.match(r.body.error, field);
    }
    const cross = await svc.rest.get(`/api/entities/${other}/versions?page_token=${encodeURIComponent(token)}`);
    assert.is(cross.status, 400);
    assert.is((await svc.rest.get(`/api/entities/${newEntityId()}/versions`)).body.code, "ENTITY_NOT_FOUND");
  });

  s("GetDownloadUrl signs a read-only URL that fetches the package", async ({ svc }) => {
    const e = newEntityId();
    const p = await push(svc, e, { content: "the bytes of the package" });
    const v = p.confirm!.body.version;
    const before = Date.now();
    const dl = await svc.rest.get(`/api/entities/${e}/versions/${v.id}/download`);
    assert.is(dl.status, 200);
    assert.equal(dl.body.version, v);
    assert.is(dl.body.lockfile_download_url, undefined);
    const ttl = Date.parse(dl.body.expires_at) - before;
    assert.ok(ttl > 4 * 60_000 && ttl <= 5 * 60_000, `download ttl ${ttl}`);
    const got = await fetch(dl.body.download_url);
    assert.is(got.status, 200);
    assert.is(await got.text(), "the bytes of the package");
    const put = await fetch(dl.body.download_url, { method: "PUT", body: "x", headers: { "x-ms-blob-type": "BlockBlob" } });
    assert.is(put.status, 403);
    const sibling = new URL(dl.body.download_url);
    sibling.pathname = sibling.pathname.replace(/package$/, "package-lock.json");
    assert.is((await fetch(sibling)).status, 403);
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/nope/download`)).body.code, "VERSION_NOT_FOUND");
  });

  return s;
}

import * as assert from "uvu/assert";
import type { Backend } from "../support/env.js";
import { newEntityId, push, spawnService, uploadOnly, type TestService } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

type Prepared = Awaited<ReturnType<typeof uploadOnly>>;

function confirmBody(p: Prepared, base: string | undefined) {
  return {
    storage_path: p.res.body.storage_path,
    version: p.version,
    source_hash: p.sourceHash,
    file_size_bytes: Buffer.byteLength(p.content),
    ...(base === undefined ? {} : { base_version_id: base }),
  };
}

async function race(services: TestService[], entityId: string, prepared: Prepared[], base: string | undefined) {
  const results = await Promise.all(
    prepared.map((p, i) => services[i % services.length]!.rest.post(`/api/entities/${entityId}/versions/confirm`, confirmBody(p, base))),
  );
  const created = results.filter((r) => r.status === 201);
  const stale = results.filter((r) => r.status === 409 && r.body.code === "STALE_BASE");
  const other = results.filter((r) => r.status !== 201 && !(r.status === 409 && r.body.code === "STALE_BASE"));
  return { created, stale, other };
}

/** Push protection under concurrency: the entity row lock lets exactly one confirm on a base pass. */
export function concurrencySuite(backend: Backend) {
  const s = serviceSuite("concurrency: racing confirms on one base", backend);

  s("50 concurrent confirms on one base: exactly 1 created, 49 STALE_BASE", async ({ svc }) => {
    const e = newEntityId();
    const base = (await push(svc, e)).confirm!.body.version;
    const prepared = await Promise.all(Array.from({ length: 50 }, () => uploadOnly(svc, e, { base: base.id })));
    const { created, stale, other } = await race([svc], e, prepared, base.id);
    assert.equal(other.map((r) => r.body), []);
    assert.is(created.length, 1);
    assert.is(stale.length, 49);
    const winner = created[0]!.body.version;
    for (const r of stale) assert.is(r.body.latest_version.id, winner.id);
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(list.body.versions.map((v: { id: string }) => v.id), [winner.id, base.id]);
  });

  s("20 concurrent first pushes on a new entity: exactly 1 created", async ({ svc }) => {
    const e = newEntityId();
    const prepared = await Promise.all(Array.from({ length: 20 }, () => uploadOnly(svc, e)));
    const { created, stale, other } = await race([svc], e, prepared, undefined);
    assert.equal(other.map((r) => r.body), []);
    assert.is(created.length, 1);
    assert.is(stale.length, 19);
  });

  if (backend === "mysql") {
    s("50 concurrent confirms on one base split across two service processes: exactly 1 created", async ({ svc }) => {
      const second = await spawnService({ ...svc.env, PORT: "0" }, svc.db);
      try {
        const e = newEntityId();
        const base = (await push(svc, e)).confirm!.body.version;
        const prepared = await Promise.all(Array.from({ length: 50 }, (_, i) => uploadOnly(i % 2 === 0 ? svc : second, e, { base: base.id })));
        const { created, stale, other } = await race([svc, second], e, prepared, base.id);
        assert.equal(other.map((r) => r.body), []);
        assert.is(created.length, 1);
        assert.is(stale.length, 49);
        const fromSecond = await second.rest.get(`/api/entities/${e}/versions`);
        assert.equal(fromSecond.body.versions.map((v: { id: string }) => v.id), [created[0]!.body.version.id, base.id]);
      } finally {
        await second.close();
      }
    });
  }

  return s;
}

import * as assert from "uvu/assert";
import type { Backend } from "../support/env.js";
import { blobStoreWith, newEntityId, push, spawnService, startService, uploadOnly, type TestService } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, token } from "../support/tokens.js";

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

  const racingCopies = async (env: Record<string, string>) => {
    const copies: string[] = [];
    const svc = await startService(backend, {
      env,
      blobStore: (store) =>
        blobStoreWith(store, {
          copyOnce: (source, destination, ifMatch, signal) => {
            copies.push(destination);
            return store.copyOnce(source, destination, ifMatch, signal);
          },
        }),
    });
    try {
      const e = newEntityId();
      const base = (await push(svc, e)).confirm!.body.version;
      const prepared = await Promise.all(Array.from({ length: 20 }, () => uploadOnly(svc, e, { base: base.id })));
      copies.length = 0;
      const { created, stale, other } = await race([svc], e, prepared, base.id);
      assert.equal(other.map((r) => r.body), []);
      assert.is(created.length, 1);
      assert.is(stale.length, 19);
      return { copies, winner: created[0]!.body.version.storage_path as string };
    } finally {
      await svc.close();
    }
  };

  s("racing confirms of one process: only the winner copies its package, the losers learn STALE_BASE first", async () => {
    const { copies, winner } = await racingCopies({});
    assert.equal(copies, [winner], "one copy: the winner's, into its own version's folder");
  });

  s("CONFIRM_COPIES_IN_TURN=off: racing confirms each copy at once, and the outcome is the same", async () => {
    const { copies, winner } = await racingCopies({ CONFIRM_COPIES_IN_TURN: "off" });
    assert.ok(copies.length > 1, `the losers copied too (${copies.length} copies)`);
    assert.ok(copies.includes(winner));
  });

  s("20 concurrent first pushes on a new entity: exactly 1 created", async ({ svc }) => {
    const e = newEntityId();
    const prepared = await Promise.all(Array.from({ length: 20 }, () => uploadOnly(svc, e)));
    const { created, stale, other } = await race([svc], e, prepared, undefined);
    assert.equal(other.map((r) => r.body), []);
    assert.is(created.length, 1);
    assert.is(stale.length, 19);
  });

  s("concurrent reads by many callers, batched into shared statements on MySQL, each answered as if alone", async ({ svc }) => {
    const as = async (sub: string, roles: string[], orgs: string[] = []) => svc.restAs(bearer(await token({ sub, roles, orgs })));
    const owner = await as("owner", ["publisher"]);
    const admin = await as("root", ["admin"]);
    const priv = newEntityId("priv");
    const pub = newEntityId("pub");
    const v1 = (await push({ rest: owner }, priv, { setAsActive: true, lockfile: "{}" })).confirm!.body.version;
    const v2 = (await push({ rest: owner }, priv, { base: v1.id })).confirm!.body.version;
    const p1 = (await push({ rest: await as("owner2", ["publisher"]) }, pub)).confirm!.body.version;
    assert.is((await admin.post(`/api/entities/${priv}/shares`, { user_id: "sharee" })).status, 200);
    assert.is((await admin.put(`/api/entities/${priv}/stores/orgs/acme`, undefined)).status, 200);
    assert.is((await admin.put(`/api/entities/${pub}/stores/public`, undefined)).status, 200);
    const others = (n: number) => Array.from({ length: n }, (_, i) => `other-${i}`);
    const callers = [
      owner,
      admin,
      await as("sharee", []),
      await as("stranger", ["publisher"]),
      await as("member", [], ["beta", "acme"]),
      await as("member12", [], [...others(11), "acme"]),
      await as("outsider12", [], others(12)),
    ];
    const paths = [priv, pub, newEntityId("missing")].flatMap((e) => [
      `/api/entities/${e}/active-version`,
      `/api/entities/${e}/versions/${v1.id}`,
      `/api/entities/${e}/versions/${v2.id}`,
      `/api/entities/${e}/versions/${p1.id}/download`,
      `/api/entities/${e}/versions/no-such-version`,
      `/api/entities/${e}/versions?page_size=1`,
      `/api/entities/${e}/versions?page_size=5`,
    ]);
    // The push pre-check is batched too: a duplicate source hash answers
    // with the existing version and writes nothing, so it repeats exactly.
    const duplicates = [priv, pub].map((e) => [`/api/entities/${e}/versions/upload-url`, { version: "2031.01.01-000000", source_hash: e === priv ? v1.source_hash : p1.source_hash }] as const);
    // What matters of an answer: download URLs carry a fresh expiry each time.
    const gist = (r: { status: number; body: Record<string, unknown> }) => JSON.stringify({ status: r.status, body: { ...r.body, download_url: undefined, lockfile_download_url: undefined, expires_at: undefined } });
    const calls = callers.flatMap((client) => [
      ...paths.map((path) => () => client.get(path)),
      ...duplicates.map(([path, body]) => () => client.post(path, body)),
    ]);
    const alone: string[] = [];
    for (const call of calls) alone.push(gist(await call()));
    // Every outcome is in the mix: found, each kind of not found (an entity
    // the caller may not read is not found to it), and refused pushes.
    for (const code of ["ENTITY_NOT_FOUND", "VERSION_NOT_FOUND", "NO_ACTIVE_VERSION", "PERMISSION_DENIED"]) {
      assert.ok(alone.some((a) => a.includes(`"code":"${code}"`)), `no ${code} among the reads`);
    }
    assert.ok(alone.some((a) => a.startsWith('{"status":200')));
    assert.ok(alone.some((a) => a.includes('"existing_version"')), "no push answered with its duplicate");
    const batchedSoFar = async () => {
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      const count = Number(/^entity_versions_db_read_batch_size_count (\d+)/m.exec(text)?.[1] ?? 0);
      const alone = Number(/^entity_versions_db_read_batch_size_bucket\{le="1"\} (\d+)/m.exec(text)?.[1] ?? 0);
      return count - alone;
    };
    const before = await batchedSoFar();
    for (let round = 0; round < 3; round++) {
      // A different order each round, so each read meets different neighbours.
      const order = calls.map((_, i) => i).sort(() => Math.random() - 0.5);
      const together = await Promise.all(order.map((i) => calls[i]!()));
      order.forEach((i, k) => assert.is(gist(together[k]!), alone[i], `${round}: read ${i} answered differently alongside others`));
    }
    if (backend === "mysql") assert.ok((await batchedSoFar()) > before, "no read was batched with another: the test did not test batching");
  });

  if (backend === "mysql") {
    /**
     * Rounds of confirms racing on one base, split between this process and
     * a second one on the same database: in each, exactly one is created and
     * every other is told STALE_BASE naming the winner.
     */
    const acrossTwoProcesses = async (svc: TestService, rounds: number, perRound: number) => {
      const second = await spawnService({ ...svc.env, PORT: "0" }, svc.db);
      try {
        const e = newEntityId();
        let base = (await push(svc, e)).confirm!.body.version.id as string;
        const recorded = [base];
        for (let round = 0; round < rounds; round++) {
          const prepared = await Promise.all(Array.from({ length: perRound }, (_, i) => uploadOnly(i % 2 === 0 ? svc : second, e, { base })));
          const { created, stale, other } = await race([svc, second], e, prepared, base);
          assert.equal(other.map((r) => [r.status, r.body]), [], `round ${round}`);
          assert.is(created.length, 1, `round ${round}`);
          assert.is(stale.length, perRound - 1, `round ${round}`);
          base = created[0]!.body.version.id;
          for (const r of stale) assert.is(r.body.latest_version.id, base, `round ${round}`);
          recorded.unshift(base);
        }
        const fromSecond = await second.rest.get(`/api/entities/${e}/versions?page_size=100`);
        assert.equal(fromSecond.body.versions.map((v: { id: string }) => v.id), recorded);
      } finally {
        await second.close();
      }
    };

    s("50 concurrent confirms on one base split across two service processes: exactly 1 created", async ({ svc }) => {
      await acrossTwoProcesses(svc, 1, 50);
    });

    // By default each process lets one confirm of an entity at a time reach
    // the database (its turns, and the grouper holding confirms on a busy
    // entity), and the rest learn STALE_BASE from a plain read: the race
    // above seldom meets at the entity row's lock. Here every confirm goes
    // to the database alone (DATABASE_CONFIRM_GROUP_MAX=1: no grouper) and
    // at once (CONFIRM_COPIES_IN_TURN=off: no turns), so only that lock
    // (SELECT … FOR UPDATE) keeps two processes from both creating.
    s("racing confirms across two service processes, each confirm alone and without turns: exactly 1 created per base", async () => {
      const svc = await startService(backend, { env: { DATABASE_CONFIRM_GROUP_MAX: "1", CONFIRM_COPIES_IN_TURN: "off" } });
      try {
        await acrossTwoProcesses(svc, 3, 30);
      } finally {
        await svc.close();
      }
    });
  }

  return s;
}

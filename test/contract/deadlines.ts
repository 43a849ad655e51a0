import { createHash } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import * as grpc from "@grpc/grpc-js";
import knexFactory, { type Knex } from "knex";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { PrivateMariaDb } from "../support/private-mariadb.js";
import { newEntityId, push, startService, type TestService, uploadOnly } from "../support/service.js";
import type { RestResponse } from "../support/rest.js";
import { watchGrpc, watchRest } from "../support/watch-client.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Deadlines with a database that hangs (a private MariaDB frozen with
 * SIGSTOP): every protocol is answered DEADLINE_EXCEEDED at its deadline,
 * not when some timeout of the dependency runs out, and the work left
 * behind never lands once the caller has been told it failed.
 */
/**
 * The suite service's blob container, for another service on its database:
 * one on a container of its own, which holds none of the versions'
 * packages, is refused at start, as a replica given the wrong one would be.
 */
const sameContainer = (svc: TestService) => ({ AZURE_STORAGE_CONTAINER: svc.env["AZURE_STORAGE_CONTAINER"]! });

export function deadlinesSuite() {
  const s = suite<{ mariadb: PrivateMariaDb; svc: TestService }>("mysql: deadlines: a hung database never holds a caller past its deadline");
  // Every dependency timeout far beyond the deadlines tested, so only a deadline can answer.
  const env = {
    REQUEST_DEADLINE_MS: "700",
    DATABASE_ACQUIRE_TIMEOUT_MS: "30000",
    DATABASE_STATEMENT_TIMEOUT_MS: "60000",
    DATABASE_LOCK_WAIT_TIMEOUT_SECONDS: "30",
    DATABASE_POOL_MAX: "4",
  };

  s.before(async (ctx) => {
    ctx.mariadb = await PrivateMariaDb.start();
    ctx.svc = await startService("mysql", { db: { url: ctx.mariadb.url(), drop: async () => undefined }, env });
  });
  s.after(async (ctx) => {
    ctx.mariadb?.thaw();
    await ctx.svc?.close();
    await ctx.mariadb?.destroy();
  });

  /** Time to an answer, and the answer. */
  async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; value: T }> {
    const started = Date.now();
    const value = await call();
    return { ms: Date.now() - started, value };
  }

  s("gRPC grpc-timeout, Connect connect-timeout-ms, and REST's own deadline are each answered DEADLINE_EXCEEDED on time", async ({ svc, mariadb }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    mariadb.freeze();
    try {
      const auth = svc.rest.defaultHeaders["authorization"]!;
      // gRPC: a 300 ms deadline, sent as grpc-timeout by grpc-js.
      const client = new grpc.Client(svc.url.replace("http://", ""), grpc.credentials.createInsecure());
      const md = new grpc.Metadata();
      md.set("authorization", auth);
      const viaGrpc = await timed(
        () =>
          new Promise<grpc.ServiceError | null>((resolve) =>
            client.makeUnaryRequest(
              "/entityversions.v1.EntityVersionsService/GetActiveVersion",
              (x: Buffer) => x,
              (x: Buffer) => x,
              Buffer.from([0x0a, e.length, ...Buffer.from(e)]),
              md,
              { deadline: Date.now() + 300 },
              (err) => resolve(err),
            ),
          ),
      );
      client.close();
      assert.is(viaGrpc.value?.code, grpc.status.DEADLINE_EXCEEDED);
      assert.ok(viaGrpc.ms < 1_000, `gRPC answered after ${viaGrpc.ms} ms`);
      // The server's own answer, on a raw stream that has no deadline of its own.
      const raw = await timed(() => fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetActiveVersion`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "300", authorization: auth },
        body: JSON.stringify({ entityId: e }),
      }));
      assert.is(raw.value.status, 504, "Connect maps deadline_exceeded to 504");
      const connectBody = (await raw.value.json()) as { code: string };
      assert.is(connectBody.code, "deadline_exceeded");
      assert.ok(raw.ms >= 250 && raw.ms < 1_000, `Connect answered after ${raw.ms} ms`);
      // REST: no deadline of its own, the server's (REQUEST_DEADLINE_MS, 700 ms).
      const rest = await timed(() => svc.rest.get(`/api/entities/${e}/versions/${v1.id}`));
      assert.equal([rest.value.status, rest.value.body.code], [504, "DEADLINE_EXCEEDED"]);
      assert.ok(rest.ms >= 650 && rest.ms < 1_500, `REST answered after ${rest.ms} ms`);
      assert.is(rest.value.headers.get("retry-after"), "1");
      // REST with a deadline of its own, in grpc-gateway's Grpc-Timeout header.
      const restShort = await timed(() => svc.rest.get(`/api/entities/${e}/versions/${v1.id}`, { "grpc-timeout": "200m" }));
      assert.equal([restShort.value.status, restShort.value.body.code], [504, "DEADLINE_EXCEEDED"]);
      assert.ok(restShort.ms >= 150 && restShort.ms < 600, `REST with Grpc-Timeout answered after ${restShort.ms} ms`);
    } finally {
      mariadb.thaw();
    }
    // Once the database answers again, so does the service: the connections the abandoned calls held came back.
    const again = await svc.rest.get(`/api/entities/${e}/active-version`);
    assert.equal([again.status, again.body.id], [200, v1.id]);
  });

  s("a watch whose start reads a database that never answers ends DATABASE_UNAVAILABLE at the poll's time limit, not at its client's distant deadline", async ({ svc, mariadb }) => {
    const e = newEntityId();
    await push(svc, e);
    mariadb.freeze();
    let end;
    try {
      end = await timed(() => watchGrpc(svc.grpc, e, { deadlineMs: 60_000 }).ended(20_000));
    } finally {
      mariadb.thaw();
    }
    assert.equal([end.value.code, end.value.reason], [grpc.status.UNAVAILABLE, "DATABASE_UNAVAILABLE"]);
    // The time limit is at least 5 s (four poll intervals of 500 ms would be less).
    assert.ok(end.ms >= 4_500 && end.ms < 10_000, `ended after ${end.ms} ms`);
    const again = watchGrpc(svc.grpc, e);
    assert.is((await again.next(10_000)).kind, "bookmark", "the watch opens once the database answers");
    again.close();
  });

  s("a confirm past its deadline is answered DEADLINE_EXCEEDED and never lands afterwards; its retry is safe", async ({ svc, mariadb }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const content = "pushed while the database hangs";
    const up = await uploadOnly(svc, e, { base: v1.id, content, sourceHash: createHash("sha256").update(content).digest("hex") });
    const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(content), base_version_id: v1.id };
    mariadb.freeze();
    let late;
    try {
      late = await timed(() => svc.rest.post(`/api/entities/${e}/versions/confirm`, body));
    } finally {
      mariadb.thaw();
    }
    assert.equal([late.value.status, late.value.body.code], [504, "DEADLINE_EXCEEDED"]);
    assert.ok(late.ms < 2_000, `answered after ${late.ms} ms`);
    // The abandoned transaction was rolled back when the database woke, not committed.
    await sleep(500);
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(list.body.versions.map((v: { id: string }) => v.id), [v1.id], "nothing landed after the deadline");
    const retry = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.is(retry.status, 201, JSON.stringify(retry.body));
  });

  s("a REST call its client cancels stops, over HTTP/2 (RST_STREAM) and HTTP/1.1 (closing): nothing lands once the database wakes", async ({ svc, mariadb }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const auth = svc.rest.defaultHeaders["authorization"]!;
    for (const transport of ["h2", "http1"] as const) {
      const content = `cancelled over ${transport}`;
      const up = await uploadOnly(svc, e, { base: v1.id, content, sourceHash: createHash("sha256").update(content).digest("hex") });
      const body = JSON.stringify({ storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(content), base_version_id: v1.id });
      // A deadline far off, so that only the cancellation can stop the call.
      const headers = { authorization: auth, "content-type": "application/json", "grpc-timeout": "30S" };
      const path = `/api/entities/${e}/versions/confirm`;
      mariadb.freeze();
      try {
        if (transport === "h2") {
          const session = http2.connect(svc.url);
          session.on("error", () => undefined);
          const stream = session.request({ ":method": "POST", ":path": path, ...headers });
          stream.on("error", () => undefined);
          stream.end(body);
          await sleep(300);
          stream.close(http2.constants.NGHTTP2_CANCEL);
          await sleep(100);
          session.close();
        } else {
          const req = http.request(`${svc.url}${path}`, { method: "POST", headers });
          req.on("error", () => undefined);
          req.end(body);
          await sleep(300);
          req.destroy();
        }
        await sleep(200);
      } finally {
        mariadb.thaw();
      }
      await sleep(700);
      const list = await svc.rest.get(`/api/entities/${e}/versions`);
      assert.equal(list.body.versions.map((v: { id: string }) => v.id), [v1.id], `nothing landed after the client cancelled over ${transport}`);
    }
  });

  s("a confirm that reaches its deadline mid-transaction (blocked on the entity's lock) is rolled back when it resumes", async ({ svc, mariadb }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const up = await uploadOnly(svc, e, { base: v1.id });
    const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content), base_version_id: v1.id };
    // Another session holds the entity's row: the confirm's transaction begins and waits on it.
    const holder = knexFactory({ client: "mysql2", connection: mariadb.url(), pool: { min: 0, max: 1 } });
    const trx = await holder.transaction();
    await trx("entities").where("id", e).forUpdate().first();
    const late = await timed(() => svc.rest.post(`/api/entities/${e}/versions/confirm`, body));
    assert.equal([late.value.status, late.value.body.code], [504, "DEADLINE_EXCEEDED"]);
    assert.ok(late.ms < 2_000, `answered after ${late.ms} ms`);
    // The lock is released: the abandoned confirm goes on, decides, and must roll back.
    await trx.commit();
    await sleep(500);
    await holder.destroy();
    const list = await svc.rest.get(`/api/entities/${e}/versions`);
    assert.equal(list.body.versions.map((v: { id: string }) => v.id), [v1.id], "nothing landed after the deadline");
    const states = await svc.rest.post(`/api/entities/${e}/versions/confirm`, body);
    assert.is(states.status, 201, "the upload is still there to confirm");
  });

  s("a database gone silent: a connection waiting on it is dropped once it has been silent past any statement's bound, so the call is answered DATABASE_UNAVAILABLE and the pool frees its place", async ({ svc, mariadb }) => {
    // Statements bounded at 1 s and lock waits at 1 s: a connection silent for 7 s is waiting on nothing alive.
    const quick = await startService("mysql", {
      db: { url: mariadb.url(), drop: async () => undefined },
      env: { ...env, ...sameContainer(svc), REQUEST_DEADLINE_MS: "20000", DATABASE_STATEMENT_TIMEOUT_MS: "1000", DATABASE_LOCK_WAIT_TIMEOUT_SECONDS: "1" },
    });
    try {
      const e = newEntityId();
      await push(quick, e, { setAsActive: true });
      mariadb.freeze();
      let answer: RestResponse;
      try {
        // Its pooled connection, just used, sends the read and hears nothing: before its 20 s deadline, not at it.
        answer = await quick.rest.get(`/api/entities/${e}/active-version`);
      } finally {
        mariadb.thaw();
      }
      assert.equal([answer.status, answer.body.code], [503, "DATABASE_UNAVAILABLE"]);
      // The dropped connection's place is free again: the next call is served.
      assert.is((await quick.rest.get(`/api/entities/${e}/active-version`)).status, 200);
    } finally {
      await quick.close();
    }
  });

  s("work a call stopped waiting for keeps its place at the call gate until it ends: short deadlines cannot start work without bound", async ({ svc, mariadb }) => {
    // Each call's own deadline is long enough for it to reach the lock on a
    // loaded machine too: one that passed on the way would end its work
    // there, giving its place back for a reason that is not the one tested.
    // The server's deadline, which also bounds how long answered work keeps
    // its place, is well past the whole test.
    const capped = await startService("mysql", { db: { url: mariadb.url(), drop: async () => undefined }, env: { ...env, ...sameContainer(svc), REQUEST_DEADLINE_MS: "20000", HTTP_MAX_CALLS_PER_CALLER: "3" } });
    const holder = knexFactory({ client: "mysql2", connection: mariadb.url(), pool: { min: 0, max: 1 } });
    const status = knexFactory({ client: "mysql2", connection: mariadb.url(), pool: { min: 0, max: 1 } });
    // InnoDB refreshes what INNODB_TRX shows only when it was last read more
    // than 0.1 s before: read more often, it keeps showing the same. Hence
    // a pause before each read.
    const lockWaits = async () => {
      await sleep(150);
      return Number(((await status.raw("SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")) as [Array<{ n: number }>])[0][0]!.n);
    };
    let trx: Knex.Transaction | undefined;
    try {
      const e = newEntityId();
      const v1 = (await push(capped, e, { setAsActive: true })).confirm!.body.version;
      const v2 = (await push(capped, e, { base: v1.id })).confirm!.body.version;
      // Another session holds the entity's row: each activation's transaction waits on it.
      trx = await holder.transaction();
      await trx("entities").where("id", e).forUpdate().first();
      const deadlineMs = 3_000;
      const activate = () => capped.rest.put(`/api/entities/${e}/active-version`, { version_id: v2.id }, { "grpc-timeout": `${deadlineMs}m` });
      const sent = Date.now();
      const held = [activate(), activate(), activate()];
      // All three waiting on the lock, each in the caller's places, before any deadline passes.
      let waiting = 0;
      while ((waiting = await lockWaits()) < 3 && Date.now() - sent < deadlineMs);
      assert.is(waiting, 3, `activations waiting on the lock before their deadline (${Date.now() - sent} ms after they were sent)`);
      // Each is answered at its deadline, and its work still waits on the lock.
      assert.equal((await Promise.all(held)).map((r) => r.body.code), ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"]);
      assert.is(await lockWaits(), 3, "the work behind the answered calls still waits");
      // That work holds the caller's three places: the next calls are refused.
      const refused: string[] = [];
      for (let i = 0; i < 2; i++) refused.push((await activate()).body.code);
      assert.equal(refused, ["TOO_MANY_CALLS", "TOO_MANY_CALLS"]);
      await trx!.commit();
      // Their work ends (rolled back, past their deadlines), and the places come back.
      let after = await capped.rest.put(`/api/entities/${e}/active-version`, { version_id: v2.id });
      for (const until = Date.now() + 10_000; after.status !== 200 && Date.now() < until; ) {
        await sleep(100);
        after = await capped.rest.put(`/api/entities/${e}/active-version`, { version_id: v2.id });
      }
      assert.is(after.status, 200, JSON.stringify(after.body));
    } finally {
      if (trx !== undefined && !trx.isCompleted()) await trx.rollback().catch(() => undefined);
      await holder.destroy();
      await status.destroy();
      await capped.close();
    }
  });

  s("reads whose callers gave up before they had a connection never run: a queue of abandoned calls costs the database nothing", async ({ svc, mariadb }) => {
    const e = newEntityId();
    await push(svc, e);
    const status = knexFactory({ client: "mysql2", connection: mariadb.url(), pool: { min: 0, max: 1 } });
    const executed = async () => Number(((await status.raw("SHOW GLOBAL STATUS LIKE 'Com_stmt_execute'")) as [Array<{ Value: string }>])[0][0]!.Value);
    try {
      const before = await executed();
      mariadb.freeze();
      let answers: string[];
      try {
        // 4 take the pool's connections and hang; 20 more wait in the pool's queue. All are answered at their deadline.
        answers = (await Promise.all(Array.from({ length: 24 }, () => svc.rest.get(`/api/entities/${e}/events`, { "grpc-timeout": "200m" })))).map((r) => r.body.code);
      } finally {
        mariadb.thaw();
      }
      assert.ok(answers.every((code) => code === "DEADLINE_EXCEEDED"), JSON.stringify(answers));
      await sleep(1_000);
      const ran = (await executed()) - before;
      // The 4 that had connections ran (a statement or two each); none of the 20 queued behind them did.
      assert.ok(ran <= 8, `${ran} statements ran for 24 abandoned reads`);
    } finally {
      await status.destroy();
    }
  });

  s("a watch reset while its start read waits keeps its place until the read ends: resets cannot start reads without bound", async ({ svc, mariadb }) => {
    const capped = await startService("mysql", { db: { url: mariadb.url(), drop: async () => undefined }, env: { ...env, ...sameContainer(svc), WATCH_MAX_PER_CALLER: "2" } });
    try {
      const e = newEntityId();
      await push(capped, e);
      const headers = { authorization: capped.rest.defaultHeaders["authorization"]! };
      mariadb.freeze();
      let third;
      try {
        for (let i = 0; i < 2; i++) {
          const w = watchRest(capped.url, e, headers);
          // Reset once the server has the watch: registered, its start read is
          // under way (given a moment more on a loaded machine).
          for (let waited = 0; capped.app.watches.size < i + 1 && waited < 5_000; waited += 20) await sleep(20);
          await sleep(300);
          w.close();
          await sleep(200);
          assert.is(capped.app.watches.size, i + 1, `watch ${i + 1}, reset while its start read waits, keeps its place`);
        }
        // Refused at once; a slow machine may take its time to say so, and
        // an admitted watch would answer 200 and then DATABASE_UNAVAILABLE
        // at the read's limit (5 s), not a 429.
        third = await watchRest(capped.url, e, headers).ended(10_000);
      } finally {
        mariadb.thaw();
      }
      assert.equal([third.httpStatus, third.reason], [429, "TOO_MANY_WATCHES"]);
      // The abandoned reads end once the database answers, and the places come back.
      for (let waited = 0; capped.app.watches.size > 0 && waited < 10_000; waited += 50) await sleep(50);
      const again = watchRest(capped.url, e, headers);
      assert.is((await again.next(10_000)).kind, "bookmark");
      again.close();
    } finally {
      await capped.close();
    }
  });

  return s;
}

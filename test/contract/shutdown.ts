import http2 from "node:http2";
import net from "node:net";
import knexFactory, { type Knex } from "knex";
import { Agent, request } from "undici";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type Backend, createTestDatabase } from "../support/env.js";
import { newEntityId, push, serviceEnv, spawnService, uploadOnly } from "../support/service.js";
import { watchGrpc } from "../support/watch-client.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** SIGTERM with calls in flight: stop accepting, finish them, exit 0. (MySQL: the test holds a row lock from outside.) */
export function shutdownSuite(backend: Backend) {
  const s = suite(`${backend}: graceful shutdown`);
  if (backend !== "mysql") return s;

  s("SIGTERM: new connections are refused, REST and gRPC calls in flight finish, the process exits 0", async () => {
    const db = await createTestDatabase("mysql");
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_TIMEOUT_MS: "15000" }), db);
    const knex = knexFactory({ client: "mysql2", connection: db.url });
    try {
      const e = newEntityId();
      const v1 = (await push(svc, e)).confirm!.body.version;
      const [a, b] = await Promise.all([uploadOnly(svc, e, { base: v1.id }), uploadOnly(svc, e, { base: v1.id })]);
      const body = (p: typeof a) => ({ storage_path: p.res.body.storage_path, version: p.version, source_hash: p.sourceHash, file_size_bytes: Buffer.byteLength(p.content), base_version_id: v1.id });
      const trx = await knex.transaction();
      await trx("entities").where("id", e).forUpdate().first();
      const rest = svc.rest.post(`/api/entities/${e}/versions/confirm`, body(a));
      const grpc = svc.grpc.call("ConfirmUpload", { entity_id: e, ...body(b) });
      await sleep(500);
      const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
      svc.child.kill("SIGTERM");
      await sleep(500);
      const refused = await fetch(`${svc.url}/healthz`).then(
        () => false,
        () => true,
      );
      assert.ok(refused, "no new connections once shutting down");
      await trx.rollback();
      const [restResult, grpcResult] = await Promise.all([rest, grpc]);
      const answers = [restResult.status === 201 ? "created" : restResult.body.code, grpcResult.ok ? "created" : grpcResult.error.reason];
      assert.equal(answers.sort(), ["STALE_BASE", "created"], "both finished with real answers");
      assert.is(await exited, 0);
      assert.match(svc.output(), "shutting down");
    } finally {
      await knex.destroy();
      await svc.close();
      await db.drop();
    }
  });

  s("SIGTERM with SHUTDOWN_DRAIN_MS: not ready at once, still serving through the drain, then stopped, exit 0", async () => {
    const db = await createTestDatabase("mysql");
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_DRAIN_MS: "2000" }), db);
    try {
      const e = newEntityId();
      await push(svc, e, { setAsActive: true });
      const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
      svc.child.kill("SIGTERM");
      await sleep(300);
      assert.is((await fetch(`${svc.url}/readyz`)).status, 503, "not ready once stopping");
      assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).status, 200, "still serving while the load balancer catches up");
      assert.is(await exited, 0);
    } finally {
      await svc.close();
      await db.drop();
    }
  });

  s("SIGTERM with SHUTDOWN_DRAIN_MS: persistent connections are moved off during the drain (HTTP/1.1 Connection: close, HTTP/2 GOAWAY), and no call sent during it fails", async () => {
    const db = await createTestDatabase("mysql");
    const drainMs = 2_000;
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_DRAIN_MS: String(drainMs) }), db);
    // What a load balancer's pool of upstream connections does: keep-alive, reused.
    const agent = new Agent({ keepAliveTimeout: 60_000, connections: 4 });
    const sessions: http2.ClientHttp2Session[] = [];
    let termAt = 0;
    let stop = false;
    // A call sent as the listener closes (the drain's end) may meet a cut connection; those sent before are not let.
    const sentInDrain = (sentAt: number) => termAt > 0 && sentAt < termAt + drainMs - 200;
    const failures: string[] = [];
    const keptAlive: string[] = [];
    let answeredInDrain = 0;
    const goaways: number[] = [];
    const goneAway = new WeakSet<http2.ClientHttp2Session>();
    const refusedAfterDrain = (error: unknown) => {
      const code = (error as NodeJS.ErrnoException).code ?? ((error as Error).cause as NodeJS.ErrnoException | undefined)?.code;
      return code === "ECONNREFUSED" && termAt > 0 && Date.now() >= termAt + drainMs;
    };
    const fail = (sentAt: number, error: unknown) => {
      if (refusedAfterDrain(error)) stop = true;
      else if (sentInDrain(sentAt) || termAt === 0) failures.push(`${(error as Error).message} (sent ${sentAt - termAt} ms after SIGTERM)`);
    };
    const pause = () => sleep(Math.random() * 10);
    const http1 = async (k: number) => {
      for (let i = 0; !stop; i++) {
        const sentAt = Date.now();
        try {
          const res = await request(`${svc.url}/healthz`, { dispatcher: agent });
          await res.body.text();
          // Past 300 ms the drain has begun: every answer closes its connection.
          if (termAt > 0 && sentAt > termAt + 300 && sentInDrain(sentAt)) {
            answeredInDrain++;
            if (res.headers.connection !== "close") keptAlive.push(`client ${k}, ${sentAt - termAt} ms after SIGTERM: connection ${String(res.headers.connection)}`);
          }
        } catch (error) {
          fail(sentAt, error);
        }
        await pause();
      }
    };
    const connect = () =>
      new Promise<http2.ClientHttp2Session>((resolve, reject) => {
        const session = http2.connect(svc.url);
        sessions.push(session);
        session.once("error", reject);
        session.once("connect", () => {
          session.off("error", reject);
          session.on("error", () => {});
          session.on("goaway", () => {
            goaways.push(Date.now());
            goneAway.add(session);
          });
          resolve(session);
        });
      });
    const http2Client = async () => {
      let session: http2.ClientHttp2Session | undefined;
      while (!stop) {
        const sentAt = Date.now();
        try {
          // A session that got GOAWAY takes no new streams: the client opens a new connection.
          if (session === undefined || session.closed || session.destroyed) session = await connect();
          const stream = session.request({ ":path": "/healthz" });
          await new Promise<void>((resolve, reject) => {
            stream.on("error", reject);
            stream.on("end", resolve);
            stream.resume();
          });
        } catch (error) {
          // A stream sent as the GOAWAY came is refused unrun (RFC 9113, 8.7): gRPC clients retry it on a new connection.
          const refused = (error as Error).message.includes("NGHTTP2_REFUSED_STREAM") && session !== undefined && goneAway.has(session);
          if (!refused) fail(sentAt, error);
        }
        await pause();
      }
    };
    const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
    try {
      const clients = Promise.all([...[0, 1, 2, 3].map(http1), http2Client()]);
      await sleep(500);
      termAt = Date.now();
      svc.child.kill("SIGTERM");
      await Promise.race([clients, sleep(drainMs + 10_000).then(() => (stop = true))]);
      assert.is(await exited, 0);
      assert.equal(failures, [], "no call sent during the drain failed");
      assert.ok(answeredInDrain > 0, "HTTP/1.1 calls were answered during the drain");
      assert.equal(keptAlive, [], "every HTTP/1.1 answer during the drain closed its connection");
      const first = goaways.find((at) => at >= termAt);
      assert.ok(first !== undefined && first - termAt < drainMs - 200, `the HTTP/2 session got GOAWAY during the drain (${first === undefined ? "none" : `${first - termAt} ms after SIGTERM`})`);
    } finally {
      stop = true;
      for (const session of sessions) session.destroy();
      await agent.destroy();
      await svc.close();
      await db.drop();
    }
  });

  s("SIGTERM with a watch whose start read waits on the database: calls in flight are cut at SHUTDOWN_TIMEOUT_MS from the stop, not that plus the watch's wait", async () => {
    const shutdownTimeoutMs = 3_000;
    const db = await createTestDatabase("mysql");
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) }), db);
    // One connection each: LOCK TABLES belongs to its session.
    const tableHolder = knexFactory({ client: "mysql2", connection: db.url, pool: { min: 1, max: 1 } });
    const rowHolder = knexFactory({ client: "mysql2", connection: db.url });
    let trx: Knex.Transaction | undefined;
    try {
      const e = newEntityId();
      const v1 = (await push(svc, e)).confirm!.body.version;
      const a = await uploadOnly(svc, e, { base: v1.id });
      trx = await rowHolder.transaction();
      await trx("entities").where("id", e).forUpdate().first();
      await tableHolder.raw("LOCK TABLES entity_publishers WRITE");
      const watch = watchGrpc(svc.grpc, e);
      const confirm = svc.rest
        .post(`/api/entities/${e}/versions/confirm`, { storage_path: a.res.body.storage_path, version: a.version, source_hash: a.sourceHash, file_size_bytes: Buffer.byteLength(a.content), base_version_id: v1.id })
        .then((res) => ({ at: Date.now(), status: res.status, code: res.body.code as string }));
      await sleep(700);
      const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
      const started = Date.now();
      svc.child.kill("SIGTERM");
      const answered = await confirm;
      assert.equal([answered.status, answered.code], [503, "SHUTTING_DOWN"]);
      assert.ok(answered.at - started < shutdownTimeoutMs + 1_500, `the confirm was cut ${answered.at - started} ms after SIGTERM (SHUTDOWN_TIMEOUT_MS is ${shutdownTimeoutMs})`);
      assert.is(await exited, 0);
      assert.ok(Date.now() - started < shutdownTimeoutMs + 4_000, `exited ${Date.now() - started} ms after SIGTERM`);
      watch.close();
    } finally {
      await tableHolder.raw("UNLOCK TABLES").catch(() => undefined);
      await trx?.rollback().catch(() => undefined);
      await tableHolder.destroy();
      await rowHolder.destroy();
      await svc.close();
      await db.drop();
    }
  });

  /** SIGTERM with a raw connection open that has sent `sent` and no whole request: the process exits 0 within `boundMs`, and the connection is closed. */
  const exitsPast = async (sent: string, shutdownTimeoutMs: number, boundMs: number, bound: string) => {
    const db = await createTestDatabase("sqlite");
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) }), db);
    const url = new URL(svc.url);
    const client = net.connect(Number(url.port), url.hostname);
    try {
      await new Promise<void>((resolve, reject) => client.once("connect", resolve).once("error", reject));
      client.on("error", () => {});
      const closed = new Promise<void>((resolve) => client.once("close", () => resolve()));
      if (sent !== "") {
        client.write(sent);
        await sleep(300);
      }
      const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
      const started = Date.now();
      svc.child.kill("SIGTERM");
      assert.is(await exited, 0);
      assert.ok(Date.now() - started < boundMs, `exited after ${Date.now() - started} ms (${bound})`);
      await closed;
    } finally {
      client.destroy();
      await svc.close();
      await db.drop();
    }
  };

  s("SIGTERM with a connection that never sent a byte: the process exits at once, not when that connection times out", () =>
    exitsPast("", 2_000, 8_000, "the first-bytes timeout is 30 s"));

  s("SIGTERM with a gRPC health Watch open: NOT_SERVING through the drain, then the Watch ends SHUTTING_DOWN and the process exits, not at SHUTDOWN_TIMEOUT_MS", async () => {
    const db = await createTestDatabase("sqlite");
    const drainMs = 2_000;
    const svc = await spawnService(await serviceEnv(db, { SHUTDOWN_DRAIN_MS: String(drainMs), SHUTDOWN_TIMEOUT_MS: "30000" }), db);
    const session = http2.connect(svc.url);
    session.on("error", () => {});
    try {
      // What a client with health checking keeps open on each connection.
      const watch = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
      watch.on("error", () => {});
      const statuses: Array<{ status: number; at: number }> = [];
      let buffered = Buffer.alloc(0);
      watch.on("data", (chunk: Buffer) => {
        // gRPC frames of HealthCheckResponse: field 1 (status) as a varint, or empty for UNKNOWN.
        buffered = Buffer.concat([buffered, chunk]);
        while (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt32BE(1)) {
          const message = buffered.subarray(5, 5 + buffered.readUInt32BE(1));
          statuses.push({ status: message.length === 2 && message[0] === 0x08 ? message[1]! : 0, at: Date.now() });
          buffered = buffered.subarray(5 + message.length);
        }
      });
      const ended = new Promise<{ trailers: http2.IncomingHttpHeaders; at: number }>((resolve) => {
        let trailers: http2.IncomingHttpHeaders = {};
        watch.on("response", (h) => (trailers = h["grpc-status"] === undefined ? trailers : h));
        watch.on("trailers", (h) => (trailers = h));
        watch.on("close", () => resolve({ trailers, at: Date.now() }));
      });
      watch.end(Buffer.alloc(5));
      for (let i = 0; i < 100 && statuses.length === 0; i++) await sleep(50);
      assert.equal(statuses.map((s) => s.status), [1], "SERVING");
      const exited = new Promise<number | null>((resolve) => svc.child.once("exit", (code) => resolve(code)));
      const started = Date.now();
      svc.child.kill("SIGTERM");
      const end = await ended;
      assert.equal(statuses.map((s) => s.status), [1, 2], "NOT_SERVING once stopping, before the Watch ends");
      assert.ok(statuses[1]!.at - started < drainMs, `NOT_SERVING ${statuses[1]!.at - started} ms after SIGTERM: within the drain`);
      assert.ok(end.at - started >= drainMs - 200, `the Watch ended ${end.at - started} ms after SIGTERM: not before the drain's end`);
      assert.is(end.trailers["grpc-status"], "14", "UNAVAILABLE: retry on another replica");
      assert.match(String(end.trailers["grpc-message"]), "shutting down");
      assert.is(await exited, 0);
      // The drain plus a few seconds: nowhere near SHUTDOWN_TIMEOUT_MS.
      assert.ok(Date.now() - started < drainMs + 8_000, `exited ${Date.now() - started} ms after SIGTERM (SHUTDOWN_TIMEOUT_MS is 30 s)`);
    } finally {
      session.destroy();
      await svc.close();
      await db.drop();
    }
  });

  // The head's last blank line never comes: no request reaches the service.
  s("SIGTERM with an HTTP/1.1 request head half sent: the process exits at once, not at SHUTDOWN_TIMEOUT_MS", () =>
    exitsPast("GET /healthz HTTP/1.1\r\nHost: x\r\n", 30_000, 10_000, "SHUTDOWN_TIMEOUT_MS is 30 s"));

  return s;
}

// Calls running at once: one connection (HTTP/2 streams left waiting, or
// reset as soon as they are sent) and the whole process are held to their
// limits, and every place is given back. Against a real process.
import http from "node:http";
import http2 from "node:http2";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { createTestDatabase, type TestDatabase } from "./support/env.js";
import { answerOf, grpcStatusOf } from "./support/raw-h2.js";
import { newEntityId, push, serviceEnv, spawnService } from "./support/service.js";
import { bearer, token } from "./support/tokens.js";

type Spawned = Awaited<ReturnType<typeof spawnService>>;
const s = suite<{ svc: Spawned; db: TestDatabase }>("call gate: unary calls running per connection and per process");

s.before(async (ctx) => {
  ctx.db = await createTestDatabase("sqlite");
  ctx.svc = await spawnService(
    // One caller may take every place here (the per-caller share has its own test).
    await serviceEnv(ctx.db, { HTTP_MAX_CALLS_PER_CONNECTION: "10", HTTP_MAX_CALLS_IN_FLIGHT: "25", HTTP_MAX_CALLS_QUEUED: "2", HTTP_MAX_CALLS_PER_CALLER: "25", REQUEST_BODY_TIMEOUT_MS: "1500" }),
    ctx.db,
  );
});
s.after(async (ctx) => {
  await ctx.svc?.close();
  await ctx.db?.drop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function connect(url: string): Promise<{ session: http2.ClientHttp2Session; goaway: Promise<boolean> }> {
  const session = http2.connect(url);
  session.on("error", () => {});
  const goaway = new Promise<boolean>((resolve) => {
    session.once("goaway", () => resolve(true));
    session.once("close", () => resolve(false));
  });
  await new Promise<void>((resolve) => session.once("remoteSettings", () => resolve()));
  return { session, goaway };
}

/** A REST call whose JSON body starts and never ends: it holds its place until the body deadline. */
function stalled(session: http2.ClientHttp2Session, authorization: string): Promise<{ status: number; code: string; error: string }> {
  return new Promise((resolve) => {
    const req = session.request({ ":method": "POST", ":path": "/api/entities/gated/versions/upload-url", "content-type": "application/json", "content-length": "100", authorization });
    let status = 0;
    let text = "";
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.on("error", () => {});
    req.on("close", () => {
      const body = text === "" ? { code: `rst ${req.rstCode}`, error: "" } : (JSON.parse(text) as { code: string; error: string });
      resolve({ status, code: body.code, error: body.error });
    });
    req.write("{");
  });
}

/** Whether n calls at once, each on its own HTTP/1.1 connection, are all let in. */
async function allLetIn(svc: Spawned, n: number): Promise<string[]> {
  const answers = await Promise.all(
    Array.from({ length: n }, () =>
      fetch(`${svc.url}/api/entities/nobody-has-it/active-version`, { headers: { authorization: svc.rest.defaultHeaders["authorization"]!, connection: "close" } }).then(
        async (r) => ((await r.json()) as { code: string }).code,
      ),
    ),
  );
  return [...new Set(answers)];
}

s("one HTTP/2 connection past its calls is refused TOO_MANY_CALLS and sent GOAWAY; its running calls finish", async ({ svc }) => {
  const { session, goaway } = await connect(svc.url);
  const auth = svc.rest.defaultHeaders["authorization"]!;
  const calls = Array.from({ length: 15 }, () => stalled(session, auth));
  assert.ok(await goaway, "GOAWAY");
  const answers = await Promise.all(calls);
  session.destroy();
  const codes = answers.map((a) => a.code);
  // Ten let in (held to the body deadline), the eleventh refused; the
  // streams sent after GOAWAY are REFUSED_STREAM, which a client may retry
  // on a new connection (RFC 9113, 8.7).
  assert.is(codes.filter((c) => c === "REQUEST_BODY_TIMEOUT").length, 10, JSON.stringify(codes));
  const refused = answers.filter((a) => a.code === "TOO_MANY_CALLS");
  assert.ok(refused.length >= 1, JSON.stringify(codes));
  assert.ok(refused.every((a) => a.status === 429 && /This connection already has 10 calls running/.test(a.error)), JSON.stringify(refused[0]));
  assert.ok(codes.every((c) => c === "REQUEST_BODY_TIMEOUT" || c === "TOO_MANY_CALLS" || c === `rst ${http2.constants.NGHTTP2_REFUSED_STREAM}`), JSON.stringify(codes));
  assert.equal(await allLetIn(svc, 25), ["ENTITY_NOT_FOUND"], "every place was given back");
});

s("the process past its calls has the next ones wait their turn, and refuses TOO_MANY_CALLS past its queue; places come back", async ({ svc }) => {
  const auth = svc.rest.defaultHeaders["authorization"]!;
  const sessions = await Promise.all([connect(svc.url), connect(svc.url), connect(svc.url)]);
  const calls: Array<Promise<{ status: number; code: string; error: string }>> = [];
  for (const { session } of sessions) {
    for (let i = 0; i < 10; i++) calls.push(stalled(session, auth));
    await sleep(100);
  }
  const answers = await Promise.all(calls);
  for (const { session } of sessions) session.destroy();
  const codes = answers.map((a) => a.code);
  // 25 run at once, 2 wait for a place and then run, 3 are refused.
  const refused = answers.filter((a) => a.code === "TOO_MANY_CALLS");
  assert.is(refused.length, 3, JSON.stringify(codes));
  assert.ok(refused.every((a) => a.status === 429 && /at its limit of 25 calls running/.test(a.error)), JSON.stringify(refused[0]));
  assert.is(codes.filter((c) => c === "REQUEST_BODY_TIMEOUT").length, 27, JSON.stringify(codes));
  assert.equal(await allLetIn(svc, 25), ["ENTITY_NOT_FOUND"]);
});

s("one caller over many connections holds at most its share of the places; other callers still get theirs", async () => {
  const db = await createTestDatabase("sqlite");
  // The default share: a quarter of the process's places.
  const svc = await spawnService(await serviceEnv(db, { HTTP_MAX_CALLS_IN_FLIGHT: "32", REQUEST_BODY_TIMEOUT_MS: "1500" }), db);
  try {
    const auth = svc.rest.defaultHeaders["authorization"]!;
    const sessions = await Promise.all([connect(svc.url), connect(svc.url), connect(svc.url)]);
    const calls = sessions.flatMap(({ session }) => Array.from({ length: 4 }, () => stalled(session, auth)));
    await sleep(300);
    const other = await fetch(`${svc.url}/api/entities/nobody-has-it/active-version`, { headers: bearer(await token({ sub: "someone-else" })) });
    assert.is(((await other.json()) as { code: string }).code, "ENTITY_NOT_FOUND", "another caller is let in meanwhile");
    const answers = await Promise.all(calls);
    for (const { session } of sessions) session.destroy();
    const codes = answers.map((a) => a.code);
    assert.is(codes.filter((c) => c === "REQUEST_BODY_TIMEOUT").length, 8, JSON.stringify(codes));
    const refused = answers.filter((a) => a.code === "TOO_MANY_CALLS");
    assert.is(refused.length, 4, JSON.stringify(codes));
    assert.ok(refused.every((a) => a.status === 429 && /You already have 8 calls running on this server/.test(a.error)), JSON.stringify(refused[0]));
    assert.equal(await allLetIn(svc, 8), ["ENTITY_NOT_FOUND"], "the caller's places came back");
  } finally {
    await svc.close();
    await db.drop();
  }
});

s("a client's deadline counts from its call's arrival: one that passes while the call waits for its place ends it DEADLINE_EXCEEDED, and nothing is written", async () => {
  const db = await createTestDatabase("sqlite");
  const svc = await spawnService(await serviceEnv(db, { HTTP_MAX_CALLS_IN_FLIGHT: "1", HTTP_MAX_CALLS_QUEUED: "5", REQUEST_BODY_TIMEOUT_MS: "3000" }), db);
  try {
    const auth = svc.rest.defaultHeaders["authorization"]!;
    const e = newEntityId("deadline");
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version.id as string;
    const v2 = (await push(svc, e, { base: v1 })).confirm!.body.version.id as string;
    const { session } = await connect(svc.url);
    // The only place, held until its body's deadline (3 s).
    const holder = stalled(session, auth);
    await sleep(200);
    const body = Buffer.from(JSON.stringify({ entityId: e, versionId: v2 }));
    const framed = Buffer.concat([Buffer.from([0, 0, 0, 0, body.length]), body]);
    const started = Date.now();
    // A client that does not reset its stream at its deadline (raw HTTP/2, some proxies).
    const req = session.request({ ":method": "POST", ":path": "/entityversions.v1.EntityVersionsService/SetActiveVersion", "content-type": "application/grpc+json", te: "trailers", "grpc-timeout": "1S", authorization: auth });
    req.end(framed);
    const grpcStatus = await grpcStatusOf(req);
    const waited = Date.now() - started;
    assert.is(grpcStatus, "4", "DEADLINE_EXCEEDED");
    assert.ok(waited < 2_500, `answered after ${waited} ms, for a deadline of 1 s`);
    // REST, with grpc-gateway's Grpc-Timeout, the same.
    const put = session.request({ ":method": "PUT", ":path": `/api/entities/${e}/active-version`, "content-type": "application/json", "grpc-timeout": "500m", authorization: auth });
    put.end(JSON.stringify({ version_id: v2 }));
    const rest = await answerOf(put);
    assert.is(rest.status, 504, rest.text);
    assert.match(rest.text, /DEADLINE_EXCEEDED/);
    // Only the call's own protocol's header is its deadline: a stray
    // grpc-timeout on a Connect call, or connect-timeout-ms on a gRPC one, is not.
    const waitedFor = async (call: () => Promise<{ status: number; text: string }>) => {
      const from = Date.now();
      return { ...(await call()), ms: Date.now() - from };
    };
    const connectCall = waitedFor(() => {
      const r = session.request({ ":method": "POST", ":path": "/entityversions.v1.EntityVersionsService/GetActiveVersion", "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "20000", "grpc-timeout": "300m", authorization: auth });
      r.end(JSON.stringify({ entityId: e }));
      return answerOf(r);
    });
    const grpcCall = waitedFor(async () => {
      const r = session.request({ ":method": "POST", ":path": "/entityversions.v1.EntityVersionsService/GetActiveVersion", "content-type": "application/grpc+json", te: "trailers", "connect-timeout-ms": "300", authorization: auth });
      const message = Buffer.from(JSON.stringify({ entityId: e }));
      r.end(Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]));
      return { status: Number(await grpcStatusOf(r)), text: "" };
    });
    const [viaConnect, viaGrpc] = await Promise.all([connectCall, grpcCall]);
    assert.is(viaConnect.status, 200, viaConnect.text);
    assert.ok(viaConnect.ms > 600, `the Connect call waited ${viaConnect.ms} ms for its place, past the stray grpc-timeout`);
    assert.is(viaGrpc.status, 0, "the gRPC call, without a grpc-timeout, waited for its place and ran");
    assert.ok(viaGrpc.ms > 600, `the gRPC call waited ${viaGrpc.ms} ms`);
    assert.is((await holder).code, "REQUEST_BODY_TIMEOUT");
    session.destroy();
    await sleep(300);
    assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v1, "neither activation was made");
  } finally {
    await svc.close();
    await db.drop();
  }
});

s("calls refused from their headers hold no place, even when their answers are never read: no token, or a caller past its share", async () => {
  const db = await createTestDatabase("sqlite");
  // Four places, no queue, a share of one; an answer not taken is held for 8 s.
  const svc = await spawnService(
    await serviceEnv(db, { HTTP_MAX_CALLS_IN_FLIGHT: "4", HTTP_MAX_CALLS_QUEUED: "0", HTTP_MAX_CALLS_PER_CALLER: "1", RESPONSE_BODY_TIMEOUT_MS: "8000", REQUEST_BODY_TIMEOUT_MS: "1500" }),
    db,
  );
  const sessions: http2.ClientHttp2Session[] = [];
  try {
    const greedy = svc.rest.defaultHeaders["authorization"]!;
    // Clients that never read an answer's body (a flow-control window of 0).
    const closed: Array<Promise<void>> = [];
    const unread = async (headers: Record<string, string>, n: number) => {
      const session = http2.connect(svc.url, { settings: { initialWindowSize: 0 } });
      session.on("error", () => {});
      sessions.push(session);
      const statuses = await Promise.all(
        Array.from({ length: n }, () => new Promise<number>((resolve) => {
          const req = session.request({ ":method": "GET", ":path": "/api/entities/nobody-has-it/active-version", ...headers });
          closed.push(new Promise((resolve) => req.once("close", () => resolve())));
          req.on("response", (h) => resolve(Number(h[":status"])));
          req.on("error", () => resolve(0));
        })),
      );
      return [...new Set(statuses)];
    };
    // Rounds of as many calls as there are places: each round finds them free.
    for (let round = 0; round < 3; round++) assert.equal(await unread({}, 4), [401], `no token, round ${round + 1}`);
    // The greedy caller's first call is let in, and holds its place while its answer is unread; the next are past its share.
    assert.equal(await unread({ authorization: greedy }, 1), [404]);
    for (let round = 0; round < 3; round++) assert.equal(await unread({ authorization: greedy }, 3), [429], `past its share, round ${round + 1}`);
    const other = await fetch(`${svc.url}/api/entities/nobody-has-it/active-version`, { headers: bearer(await token({ sub: "someone-else" })) });
    assert.is(((await other.json()) as { code: string }).code, "ENTITY_NOT_FOUND", "another caller is let in meanwhile");
    // Answers never taken are dropped after RESPONSE_BODY_TIMEOUT_MS, refusals too.
    const allClosed = await Promise.race([Promise.all(closed).then(() => true), sleep(20_000).then(() => false)]);
    assert.ok(allClosed, "every unread answer's stream was closed by the server");
  } finally {
    for (const session of sessions) session.destroy();
    await svc.close();
    await db.drop();
  }
});

s("answered calls give their place back on every protocol: many more than a connection's limit, one after another, all succeed", async ({ svc }) => {
  const e = newEntityId();
  await push(svc, e, { setAsActive: true });
  // One grpc-js channel is one HTTP/2 connection; its limit here is 10.
  for (let i = 0; i < 30; i++) {
    const r = await svc.grpc.call("GetActiveVersion", { entity_id: e });
    assert.ok(r.ok, `call ${i}: ${JSON.stringify(r)}`);
  }
  // Connect's protocol over HTTP/1.1 keep-alive: one connection too.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < 30; i++) {
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${svc.url}/entityversions.v1.EntityVersionsService/GetActiveVersion`, {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", authorization: svc.rest.defaultHeaders["authorization"]! },
      }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
      req.on("error", reject);
      req.end(JSON.stringify({ entity_id: e }));
    });
    assert.is(status, 200, `Connect call ${i}`);
  }
  agent.destroy();
});

s("streams reset as soon as they are sent (rapid reset) hold no place once their work ends", async ({ svc }) => {
  const { session } = await connect(svc.url);
  const auth = svc.rest.defaultHeaders["authorization"]!;
  for (let i = 0; i < 500; i++) {
    const req = session.request({ ":method": "GET", ":path": "/api/entities/nobody-has-it/active-version", authorization: auth });
    req.on("error", () => {});
    req.close(http2.constants.NGHTTP2_CANCEL);
  }
  await sleep(1000);
  session.destroy();
  assert.equal(await allLetIn(svc, 25), ["ENTITY_NOT_FOUND"]);
  assert.is(svc.child.exitCode, null);
});

s.run();

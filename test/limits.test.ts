// What one client can make the server hold: HTTP/2 streams and idle
// sessions, request bodies in flight, slow bodies, and callers refused
// before their bodies are read. Run against a real process, whose memory is
// read from /proc.
import fs from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { gzipSync } from "node:zlib";
import { fromBinary } from "@bufbuild/protobuf";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";
import { createTestDatabase, type TestDatabase } from "./support/env.js";
import { answerOf, flag, frameType, grpcStatusOf, healthWatch, RawH2, type RawFrame, sessionFrom } from "./support/raw-h2.js";
import { serviceEnv, spawnService, type TestService } from "./support/service.js";

type Spawned = Awaited<ReturnType<typeof spawnService>>;
const s = suite<{ svc: Spawned; db: TestDatabase }>("limits: streams, idle sessions, bodies in flight, slow bodies");

s.before(async (ctx) => {
  ctx.db = await createTestDatabase("sqlite");
  ctx.svc = await spawnService(
    await serviceEnv(ctx.db, {
      REQUEST_BODY_TIMEOUT_MS: "1500",
      RESPONSE_BODY_TIMEOUT_MS: "1000",
      HTTP_IDLE_TIMEOUT_MS: "2000",
      MAX_CONNECTION_BUFFERED_BYTES: "3145728",
      MAX_BUFFERED_BYTES: "6291456",
      // The RSS checks below are of what the service holds. glibc's
      // dynamic mmap threshold would have freed body chunks kept in its
      // heap instead (a plateau some 100 MB higher under repeated floods,
      // reached in one flood or another): with a fixed one, RSS follows
      // what is held.
      MALLOC_MMAP_THRESHOLD_: "65536",
    }),
    ctx.db,
  );
});
s.after(async (ctx) => {
  await ctx.svc?.close();
  await ctx.db?.drop();
});

const confirmPath = "/entityversions.v1.EntityVersionsService/ConfirmUpload";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A plain TCP connection to the service, once connected. */
async function rawConnection(svc: Spawned): Promise<net.Socket> {
  const socket = net.connect(Number(new URL(svc.url).port), "127.0.0.1");
  socket.on("error", () => {});
  await new Promise((resolve) => socket.once("connect", resolve));
  return socket;
}

/** Milliseconds from now until `target` closes; -1 when it is still open after `timeoutMs`. */
function msUntilClosed(target: { once(event: "close", listener: () => void): unknown }, timeoutMs: number): Promise<number> {
  const started = Date.now();
  return Promise.race([new Promise<number>((resolve) => target.once("close", () => resolve(Date.now() - started))), sleep(timeoutMs).then(() => -1)]);
}

function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kb) * 1024;
}

/** A gRPC frame header promising a message of `length` bytes, and that many bytes. */
function frame(length: number): Buffer {
  const out = Buffer.alloc(5 + length, 0x61);
  out[0] = 0;
  out.writeUInt32BE(length, 1);
  return out;
}

/** How each of many streams on one session ended. */
async function flood(url: string, n: number, headers: Record<string, string>, bytesEach: number) {
  // The client's own session memory must hold the bodies it queues.
  const session = http2.connect(url, { maxSessionMemory: 2000 });
  session.on("error", () => {});
  await new Promise<void>((resolve) => session.once("remoteSettings", () => resolve()));
  const advertised = session.remoteSettings.maxConcurrentStreams;
  // Made once, before the first stream: made per stream (400 MB), on a
  // loaded machine it took longer than the server's idle timeout, which
  // then rightly closed the session before any stream had opened.
  const body = frame(bytesEach - 5).subarray(0, bytesEach - 1000);
  const outcomes = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<string>((resolve) => {
          const req = session.request({ ":path": confirmPath, ":method": "POST", "content-type": "application/grpc", te: "trailers", ...headers });
          let status = "no status";
          req.on("response", (h) => (status = String(h["grpc-status"] ?? status)));
          req.on("trailers", (h) => (status = String(h["grpc-status"] ?? status)));
          req.on("error", () => {});
          req.on("close", () => resolve(req.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM ? "refused" : status));
          req.resume();
          // Sends all but the last bytes of one message and never ends the stream.
          req.write(body);
        }),
    ),
  );
  session.destroy();
  return { advertised, outcomes };
}

async function authorizedCallWorks(svc: TestService): Promise<boolean> {
  const r = await svc.grpc.call("GetActiveVersion", { entity_id: "still-answering" });
  return !r.ok && r.error.reason === "ENTITY_NOT_FOUND";
}

s("one unauthenticated HTTP/2 connection flooding streams: refused before any body is read, memory bounded, service answering", async ({ svc }) => {
  const before = rssBytes(svc.child.pid!);
  const { advertised, outcomes } = await flood(svc.url, 400, {}, 1024 * 1024);
  assert.is(advertised, 100, "the server advertises SETTINGS_MAX_CONCURRENT_STREAMS");
  // Every stream was answered UNAUTHENTICATED (16), none left open; the
  // protocol lets the server refuse (REFUSED_STREAM, safe to retry) a
  // stream it sees opened past its limit before it has counted an earlier
  // one closed, which a loaded machine's timing can show.
  const counts = outcomes.reduce<Record<string, number>>((acc, o) => ({ ...acc, [o]: (acc[o] ?? 0) + 1 }), {});
  assert.equal(Object.keys(counts).filter((k) => k !== "16" && k !== "refused"), [], JSON.stringify(counts));
  assert.ok((counts["16"] ?? 0) >= advertised!, JSON.stringify(counts));
  const grown = rssBytes(svc.child.pid!) - before;
  assert.ok(grown < 64 * 1024 * 1024, `RSS grew by ${Math.round(grown / 1048576)} MB`);
  assert.ok(await authorizedCallWorks(svc));
});

s("a client that never takes its answers (HTTP/2 window 0): each is dropped after RESPONSE_BODY_TIMEOUT_MS, its place freed", async ({ svc }) => {
  const session = http2.connect(svc.url, { settings: { initialWindowSize: 0 } });
  session.on("error", () => {});
  const started = Date.now();
  const ends = await Promise.all(
    Array.from(
      { length: 20 },
      () =>
        new Promise<{ status: unknown; rstCode: number | undefined; ms: number }>((resolve) => {
          const req = session.request({ ":path": "/api/entities/never-read/active-version", ":method": "GET", ...svc.rest.defaultHeaders });
          let status: unknown;
          req.on("response", (h) => (status = h[":status"]));
          req.on("error", () => {});
          req.on("close", () => resolve({ status, rstCode: req.rstCode, ms: Date.now() - started }));
          const timer = setTimeout(() => resolve({ status, rstCode: undefined, ms: Date.now() - started }), 8_000);
          req.once("close", () => clearTimeout(timer));
        }),
    ),
  );
  session.destroy();
  // The answers' headers went out; their bodies could not, and were given up on.
  assert.equal([...new Set(ends.map((e) => `${e.status} ${e.rstCode}`))], [`404 ${http2.constants.NGHTTP2_CANCEL}`], JSON.stringify(ends.slice(0, 3)));
  assert.ok(Math.max(...ends.map((e) => e.ms)) < 6_000, "dropped soon after the timeout");
  assert.ok(await authorizedCallWorks(svc));
});

s("authenticated streams that never end: held to the connection's byte budget and the body deadline", async ({ svc }) => {
  const before = rssBytes(svc.child.pid!);
  const started = Date.now();
  const { outcomes } = await flood(svc.url, 200, { authorization: svc.rest.defaultHeaders["authorization"]! }, 1024 * 1024);
  const counts = outcomes.reduce<Record<string, number>>((acc, o) => ({ ...acc, [o]: (acc[o] ?? 0) + 1 }), {});
  // At most 3 MiB of bodies at once on the connection: past it, a stream's
  // next chunk is RESOURCE_EXHAUSTED (8); a body that fits but never ends
  // is DEADLINE_EXCEEDED (4) at the body deadline. Nothing else, nothing left open.
  assert.ok((counts["8"] ?? 0) >= 150, JSON.stringify(counts));
  assert.is(Object.keys(counts).filter((k) => k !== "8" && k !== "4").length, 0, JSON.stringify(counts));
  assert.ok(Date.now() - started < 10_000, "no stream outlives the body deadline by much");
  const grown = rssBytes(svc.child.pid!) - before;
  assert.ok(grown < 64 * 1024 * 1024, `RSS grew by ${Math.round(grown / 1048576)} MB`);
  assert.ok(await authorizedCallWorks(svc));
});

s("compressed messages hold what they inflate to, once inflated: calls waiting for their bodies hold nothing, and many compressed calls on one connection are served", async ({ svc }) => {
  // GetActiveVersion{entity_id: "missing"}, with an unknown field 99 of
  // `padding` bytes: a few hundred bytes gzipped, `padding` once inflated.
  const varint = (n: number) => {
    const out: number[] = [];
    for (; n > 127; n >>>= 7) out.push((n & 127) | 128);
    return [...out, n];
  };
  const framed = (padding: number) => {
    const gz = gzipSync(Buffer.concat([Buffer.from("\x0a\x07missing", "latin1"), Buffer.from([0x9a, 0x06, ...varint(padding)]), Buffer.alloc(padding)]));
    const out = Buffer.concat([Buffer.from([1]), Buffer.alloc(4), gz]);
    out.writeUInt32BE(gz.length, 1);
    return out;
  };
  const big = framed(1024 * 1024 - 64);
  assert.ok(big.length < 1200, `${big.length} bytes on the wire`);
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  const call = (body: Buffer | undefined) => {
    const req = session.request({ ":path": "/entityversions.v1.EntityVersionsService/GetActiveVersion", ":method": "POST", "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip", ...svc.rest.defaultHeaders });
    if (body !== undefined) req.end(body);
    return grpcStatusOf(req);
  };
  try {
    // Eight on one connection (its budget 3 MiB) that never send their
    // message: at MAX_REQUEST_BYTES each from the start, they held it all.
    const waiting = Array.from({ length: 8 }, () => call(undefined));
    await sleep(300);
    const small = await Promise.all(Array.from({ length: 20 }, () => call(framed(100))));
    assert.equal([...new Set(small)], ["5"], "every small compressed call is served (NOT_FOUND)");
    const message = gzipSync(Buffer.from(JSON.stringify({ entityId: "missing" }))).toString("base64url");
    const get = await answerOf(session.request({ ":path": `/entityversions.v1.EntityAccessService/GetEntityAccess?connect=v1&encoding=json&compression=gzip&base64=1&message=${message}`, ...svc.rest.defaultHeaders }));
    assert.is(get.status, 404, get.text);
    assert.is(await call(big), "5", "a message that inflates to MAX_REQUEST_BYTES is served");
    assert.equal([...new Set(await Promise.all(waiting))], ["4"], "the calls that never sent their message end at the body deadline");
  } finally {
    session.destroy();
  }
});

s("streams that stay open (here health Watch, which needs no token) with compressed messages hold only their small messages' worth of the budget: calls with bodies go on", async ({ svc }) => {
  // The empty message, gzipped: a few bytes on the wire.
  const gz = gzipSync(Buffer.alloc(0));
  const framed = Buffer.concat([Buffer.from([1]), Buffer.alloc(4), gz]);
  framed.writeUInt32BE(gz.length, 1);
  // From four addresses: one may hold only a quarter of HTTP_MAX_OPEN_STREAMS.
  const sessions = Array.from({ length: 4 }, (_, i) => sessionFrom(svc.url, `127.0.0.${11 + i}`));
  const open: http2.ClientHttp2Stream[] = [];
  try {
    // 4 connections × 20 health watches (under HTTP_MAX_OPEN_STREAMS): at MAX_REQUEST_BYTES each they held 80 MiB of a 6 MiB budget.
    for (const session of sessions) {
      for (let i = 0; i < 20; i++) {
        const req = session.request({ ":path": "/grpc.health.v1.Health/Watch", ":method": "POST", "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip" });
        req.on("error", () => {});
        req.resume();
        req.end(framed);
        open.push(req);
      }
    }
    const firsts = await Promise.all(open.map((req) => new Promise<boolean>((resolve) => {
      req.once("data", () => resolve(true));
      req.once("close", () => resolve(false));
    })));
    assert.ok(firsts.every(Boolean), "every watch is answered SERVING and stays open");
    // A call with a body, from another client, is read and served.
    const r = await svc.rest.post(`/api/entities/${"budget-" + Date.now()}/versions/upload-url`, { version: "2024.01.01-000000", source_hash: "ab" });
    assert.is.not(r.body.code, "IN_FLIGHT_BYTES_EXCEEDED", JSON.stringify(r.body));
  } finally {
    for (const session of sessions) session.destroy();
  }
});

s("one address holds at most a quarter of HTTP_MAX_OPEN_STREAMS (health Watch, reflection), however many connections it opens: another address still gets its Watch", async ({ svc }) => {
  // 4 connections × 7 watches from one address: each connection under a quarter (25 of 100), the address over it.
  const hog = Array.from({ length: 4 }, () => sessionFrom(svc.url, "127.0.0.21"));
  const other = sessionFrom(svc.url, "127.0.0.22");
  try {
    const firsts = await Promise.all(hog.flatMap((session) => Array.from({ length: 7 }, () => healthWatch(session).first)));
    assert.is(firsts.filter((f) => f.served).length, 25);
    const refused = firsts.filter((f) => !f.served);
    assert.equal(refused, Array.from({ length: 3 }, () => ({ served: false, status: "8", metadata: { limit: "25", scope: "peer" } })));
    assert.equal(await healthWatch(other).first, { served: true }, "another address is served");
    // The address's places come back as its streams end.
    for (const session of hog) session.destroy();
    const again = sessionFrom(svc.url, "127.0.0.21");
    let first = await healthWatch(again).first;
    for (let tries = 0; tries < 50 && !first.served; tries++) {
      await sleep(20);
      first = await healthWatch(again).first;
    }
    assert.equal(first, { served: true });
    again.destroy();
  } finally {
    for (const session of hog) session.destroy();
    other.destroy();
  }
});

s("reflection streams whose client stops taking their answers (HTTP/2 window 0) are reset within RESPONSE_BODY_TIMEOUT_MS of their answer being ready, and their places are free again", async ({ svc }) => {
  const symbol = Buffer.from("entityversions.v1.EntityVersionsService");
  const ask = Buffer.concat([Buffer.from([0x22, symbol.length]), symbol]); // ServerReflectionRequest{file_containing_symbol}
  const request = Buffer.concat([Buffer.from([0, 0, 0, 0, ask.length]), ask]);
  // Its handler blocks writing an answer the window does not let out: it
  // never asks for the next request, so the body's timeout never ends it.
  const stalled = sessionFrom(svc.url, "127.0.0.23", { initialWindowSize: 0 });
  const probe = sessionFrom(svc.url, "127.0.0.23");
  try {
    await new Promise((resolve) => stalled.once("remoteSettings", resolve));
    const started = Date.now();
    const streams = Array.from({ length: 25 }, () => {
      const req = stalled.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers" });
      req.on("error", () => {});
      req.pause();
      req.end(Buffer.concat(Array.from({ length: 200 }, () => request)));
      return new Promise<{ ms: number; rstCode: number }>((resolve) => req.once("close", () => resolve({ ms: Date.now() - started, rstCode: req.rstCode ?? -1 })));
    });
    await sleep(300);
    const held = await healthWatch(probe).first;
    assert.is(held.served ? "served" : held.metadata["scope"], "peer", "the stalled streams hold the address's 25 places");
    const ended = await Promise.race([Promise.all(streams), sleep(4_000).then(() => undefined)]);
    assert.ok(ended !== undefined, "the stalled streams are still open after 4 s");
    for (const { ms, rstCode } of ended) {
      assert.is(rstCode, http2.constants.NGHTTP2_CANCEL);
      assert.ok(ms >= 900 && ms < 3_000, `reset after ${ms} ms`);
    }
    assert.equal(await healthWatch(probe).first, { served: true }, "the places are free again");
  } finally {
    stalled.destroy();
    probe.destroy();
  }
});

s("HTTP/1.1: a caller without a token is answered before it sends its body; a stalled body gets 408; many bodies at once get 429", async ({ svc }) => {
  const url = new URL(`${svc.url}/api/entities/some-entity/versions/upload-url`);
  const send = (headers: Record<string, string>, body: Buffer | undefined, stall: boolean) =>
    new Promise<{ status: number; code: string; ms: number }>((resolve, reject) => {
      const started = Date.now();
      const req = http.request(url, { method: "POST", headers: { "content-type": "application/json", "content-length": "1048000", ...headers } }, (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, code: (JSON.parse(text) as { code: string }).code, ms: Date.now() - started }));
      });
      req.on("error", reject);
      // Node sends a request's headers with its first body bytes unless told to now.
      req.flushHeaders();
      if (body !== undefined) req.write(body);
      if (!stall) req.end();
    });
  // No body byte is ever sent: the answer cannot have waited for one.
  const anonymous = await send({}, undefined, true);
  assert.equal([anonymous.status, anonymous.code], [401, "AUTH_REQUIRED"]);
  assert.ok(anonymous.ms < 1000, `${anonymous.ms} ms`);
  const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
  const stalled = await send(auth, Buffer.from('{"version":'), true);
  assert.equal([stalled.status, stalled.code], [408, "REQUEST_BODY_TIMEOUT"]);
  // Seven bodies of ~1 MB at once against a 6 MiB process budget (each its own connection).
  const many = await Promise.all(Array.from({ length: 7 }, () => send(auth, Buffer.alloc(1_000_000, 0x20), true)));
  const codes = many.map((r) => r.code).sort();
  assert.ok(codes.includes("IN_FLIGHT_BYTES_EXCEEDED"), JSON.stringify(codes));
  assert.ok(many.filter((r) => r.code === "IN_FLIGHT_BYTES_EXCEEDED").every((r) => r.status === 429));
  assert.ok(await authorizedCallWorks(svc));
});

s("a body sent to a path no route serves, which needs no token, is held to the same budget and deadline as an API call's", async ({ svc }) => {
  const send = (path: string, method: string, stall: boolean) =>
    new Promise<{ status: number; code: string }>((resolve) => {
      const req = http.request(new URL(`${svc.url}${path}`), { method, headers: { "content-type": "application/json", "content-length": "1048000" } }, (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, code: text.startsWith("{") ? (JSON.parse(text) as { code: string }).code : `not JSON: ${text.slice(0, 80)}` }));
      });
      req.on("error", (error) => resolve({ status: 0, code: error.message }));
      req.flushHeaders();
      req.write(stall ? Buffer.from('{"a":') : Buffer.alloc(1_000_000, 0x20));
    });
  // A stalled body on an unknown path, and on a known path with the wrong method.
  const stalled = await Promise.all([send("/nothing-here", "POST", true), send("/healthz", "PUT", true)]);
  assert.equal(stalled.map((r) => [r.status, r.code]), [[408, "REQUEST_BODY_TIMEOUT"], [408, "REQUEST_BODY_TIMEOUT"]]);
  // Seven bodies of ~1 MB at once, none finished, against a 6 MiB process budget.
  const many = await Promise.all(Array.from({ length: 7 }, () => send("/nothing-here", "POST", false)));
  assert.ok(many.some((r) => r.status === 429 && r.code === "IN_FLIGHT_BYTES_EXCEEDED"), JSON.stringify(many));
  assert.ok(await authorizedCallWorks(svc));
});

s("a JSON body sent where no route serves is not parsed: its 404 or 405 is what it is answered, whatever the JSON", async ({ svc }) => {
  // Parsing a MiB of JSON costs the event loop a tenth of a second, for a caller that needs no token.
  const notJson = '{"a": [' + "{},".repeat(1000);
  for (const [path, method] of [["/nothing-here", "POST"], ["/healthz", "PUT"], ["/api/entities/e1/versions", "PATCH"]] as const) {
    const send = async (body: string) => {
      const res = await fetch(`${svc.url}${path}`, { method, headers: { "content-type": "application/json" }, body });
      return [res.status, ((await res.json()) as { code: string }).code];
    };
    const answer = await send("{}");
    assert.ok(answer[0] === 404 || answer[0] === 405, `${method} ${path}: ${JSON.stringify(answer)}`);
    assert.equal(await send(notJson), answer, `${method} ${path}`);
  }
});

s("HTTP/1.1: a chunked body past MAX_REQUEST_BYTES gets 413, and the process outlives the body's deadline", async ({ svc }) => {
  const url = new URL(`${svc.url}/api/entities/some-entity/shares`);
  const status = await new Promise<number>((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers: { "content-type": "application/json", authorization: svc.rest.defaultHeaders["authorization"]! } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    // No content-length: chunked, so the limit is found while reading.
    req.write(Buffer.alloc(1_500_000, 0x20));
    req.end();
  });
  assert.is(status, 413);
  // Past REQUEST_BODY_TIMEOUT_MS, when the unread rest of the body would time out.
  await sleep(2500);
  assert.is(svc.child.exitCode, null, svc.output().slice(-2000));
  assert.ok(await authorizedCallWorks(svc));
});

s("HTTP/2: a refusal answered before its body is read reaches the client whole, before the stream is reset", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  const paths = ["/api/entities/some-entity/versions/upload-url", "/entityversions.v1.EntityVersionsService/GetUploadUrl"];
  const answers = await Promise.all(
    Array.from({ length: 10 }, (_, i) =>
      new Promise<string>((resolve) => {
        const path = paths[i % 2]!;
        const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/json" });
        let text = "";
        let ended = false;
        req.on("data", (d: Buffer) => (text += d.toString()));
        req.on("end", () => (ended = true));
        req.on("error", () => {});
        req.on("close", () => resolve(`${ended ? "whole" : "cut"} rst=${req.rstCode} ${/"code":"(\w+)"|"code":"(\w+)/.exec(text)?.slice(1).find(Boolean) ?? text.slice(0, 40)}`));
        // More than the stream's window: the client is still sending when the answer comes.
        req.write(Buffer.alloc(200 * 1024, 0x20));
        setTimeout(() => resolve(`not closed: ${ended ? "whole" : "cut"} ${text.slice(0, 40)}`), 5000).unref();
      }),
    ),
  );
  session.destroy();
  assert.equal([...new Set(answers)].sort(), ["whole rst=0 unauthenticated", "whole rst=0 AUTH_REQUIRED"].sort(), JSON.stringify(answers));
});

s("HTTP/2: a refused request whose body ends just after its answer ends plainly, with no RST_STREAM (curl drops answers a reset follows); a body that does not come is stopped with RST_STREAM NO_ERROR", async ({ svc }) => {
  const h2 = await RawH2.connect(svc.url);
  try {
    const request = [[":method", "POST"], [":scheme", "http"], [":authority", "localhost"], [":path", "/entityversions.v1.EntityVersionsService/GetVersion"], ["content-type", "application/json"]] as const;
    const answered = (id: number) => h2.on(id).some((f) => (f.type === frameType.headers || f.type === frameType.data) && (f.flags & flag.endStream) !== 0);
    h2.request(1, request, "");
    h2.request(3, request, undefined);
    h2.request(5, request, undefined);
    // Refused from its headers (no token): the body comes once the answer is in.
    assert.ok(await h2.until(() => answered(3)), JSON.stringify(h2.frames.map((f) => [f.stream, f.type, f.flags])));
    h2.end(3, "{}");
    assert.ok(await h2.until(() => [1, 5].every(answered)));
    assert.ok(await h2.until(() => h2.on(5).some((f) => f.type === frameType.rstStream)), "the stream whose body never came is reset");
    await sleep(300);
    for (const id of [1, 3]) assert.equal(h2.on(id).filter((f) => f.type === frameType.rstStream), [], `stream ${id} ended its body: no reset`);
    assert.is(h2.on(5).find((f) => f.type === frameType.rstStream)!.payload.readUInt32BE(0), 0, "NO_ERROR");
  } finally {
    h2.close();
  }
});

s("HTTP/2: a client that goes on sending after its answer has at most a stream window of it read before RST_STREAM NO_ERROR, not all it can send in the grace", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  try {
    // Refused from its headers (no token): what follows is read only to be dropped.
    const req = session.request({ ":path": "/entityversions.v1.EntityVersionsService/GetVersion", ":method": "POST", "content-type": "application/json" });
    req.on("error", () => {});
    req.resume();
    const closed = new Promise<void>((resolve) => req.once("close", () => resolve()));
    const chunk = Buffer.alloc(16 * 1024, 0x20);
    let taken = 0;
    // Each write completes once the server's window has let it go out.
    for (let i = 0; i < 1024 && !req.closed; i++) {
      const failed = await new Promise<boolean>((resolve) => req.write(chunk, (err) => resolve(err != null)));
      if (failed) break;
      taken += chunk.length;
    }
    await closed;
    assert.is(req.rstCode, http2.constants.NGHTTP2_NO_ERROR);
    assert.ok(taken < 1024 * 1024, `${taken} bytes of a 16 MiB body went out`);
  } finally {
    session.destroy();
  }
});

s("HTTP/2: a body refused past MAX_REQUEST_BYTES frees its stream and its bytes at once, not when the connection closes", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  const call = (body: Buffer) => {
    const req = session.request({ ":path": "/entityversions.v1.EntityVersionsService/GetActiveVersion", ":method": "POST", "content-type": "application/grpc", te: "trailers", ...svc.rest.defaultHeaders });
    req.end(body);
    return grpcStatusOf(req);
  };
  try {
    // Each oversized body (the default 1 MiB limit) would hold its share of the connection's
    // 3 MiB budget for as long as its stream stayed open: the fourth would find none left.
    for (let i = 0; i < 5; i++) assert.is(await call(frame(1024 * 1024 + 1024)), "8", `oversized call ${i + 1}: RESOURCE_EXHAUSTED`);
    const entity = Buffer.from("\x0a\x07missing");
    const small = Buffer.concat([Buffer.from([0, 0, 0, 0, entity.length]), entity]);
    assert.is(await call(small), "5", "the next call on the connection is served (NOT_FOUND), not IN_FLIGHT_BYTES_EXCEEDED");
    // And each was logged and counted when it ended, not when the connection closes.
    const metrics = await (await fetch(`${svc.url}/metrics`)).text();
    const counted = Number(/entity_versions_rpc_requests_total\{rpc="entityversions.v1.EntityVersionsService\/GetActiveVersion",protocol="grpc",code="resource_exhausted"\} (\d+)/.exec(metrics)?.[1] ?? 0);
    assert.ok(counted >= 5, `counted ${counted} of 5 while the connection is open`);
  } finally {
    session.destroy();
  }
});

s("HTTP/2 advertises its header list limit (64 KiB): a request past it is refused, and the session goes on serving", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  try {
    await new Promise<void>((resolve) => session.once("remoteSettings", () => resolve()));
    assert.is(session.remoteSettings.maxHeaderListSize, 64 * 1024);
    const get = (headers: Record<string, string>) =>
      new Promise<string>((resolve) => {
        const req = session.request({ ":path": "/healthz", ...headers });
        req.on("response", (h) => resolve(String(h[":status"])));
        req.on("error", () => resolve(`rst ${req.rstCode}`));
        req.end();
      });
    assert.is(await get({ "x-big": "a".repeat(60 * 1024) }), "200");
    assert.is(await get({ "x-big": "a".repeat(70 * 1024) }), `rst ${http2.constants.NGHTTP2_REFUSED_STREAM}`);
    assert.is(await get({}), "200", "the same session still serves");
  } finally {
    session.destroy();
  }
});

s("answers outside the API a client never takes are dropped too: probes, metrics, a 404, gRPC health; HTTP/1.1 pipelined answers left unread close the connection", async ({ svc }) => {
  const session = http2.connect(svc.url, { settings: { initialWindowSize: 0 } });
  session.on("error", () => {});
  const started = Date.now();
  const envelope = Buffer.from([0, 0, 0, 0, 0]);
  const requests: Array<[string, http2.OutgoingHttpHeaders, Buffer | undefined]> = [
    ["/healthz", { ":method": "GET" }, undefined],
    ["/metrics", { ":method": "GET" }, undefined],
    ["/no/such/path", { ":method": "GET" }, undefined],
    ["/grpc.health.v1.Health/Check", { ":method": "POST", "content-type": "application/grpc", te: "trailers" }, envelope],
  ];
  const ends = await Promise.all(
    requests.map(
      ([path, headers, body]) =>
        new Promise<string>((resolve) => {
          const req = session.request({ ":path": path, ...headers });
          req.on("error", () => {});
          const timer = setTimeout(() => resolve(`${path}: still open`), 8_000);
          req.on("close", () => {
            clearTimeout(timer);
            resolve(`${path}: ${req.rstCode === http2.constants.NGHTTP2_CANCEL ? "dropped" : `closed ${req.rstCode}`} after ${Date.now() - started} ms`);
          });
          req.end(body);
        }),
    ),
  );
  session.destroy();
  for (const end of ends) assert.match(end, /: dropped after \d+ ms$/, end);
  // HTTP/1.1: answers pipelined behind one the client does not read.
  const socket = await rawConnection(svc);
  socket.write("GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(300));
  // Read nothing for two idle periods; then read what is left. A connection
  // cut by then yields what the buffers held; one left open, every answer.
  await sleep(4_500);
  let received = 0;
  socket.on("data", (chunk: Buffer) => (received += (chunk.toString("latin1").match(/HTTP\/1\.1 200/g) ?? []).length));
  await Promise.race([new Promise((resolve) => socket.once("close", resolve)), sleep(20_000)]);
  socket.destroy();
  assert.ok(received < 150, `${received} of 300 pipelined answers were sent to a client that did not read`);
  assert.ok(await authorizedCallWorks(svc));
});

s("an idle HTTP/2 session is closed after HTTP_IDLE_TIMEOUT_MS", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  const closed = await msUntilClosed(session, 8_000);
  session.destroy();
  assert.ok(closed >= 1500 && closed < 6000, `closed after ${closed} ms`);
});

s("an idle HTTP/1.1 keep-alive connection is closed after HTTP_IDLE_TIMEOUT_MS", async ({ svc }) => {
  const socket = await rawConnection(svc);
  socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  socket.resume();
  const closed = await msUntilClosed(socket, 10_000);
  socket.destroy();
  assert.ok(closed >= 1500 && closed < 7000, `closed after ${closed} ms`);
});

s("an HTTP/2 session whose only request never finishes its headers (HEADERS without END_HEADERS) is cut after two quiet periods", async ({ svc }) => {
  const socket = await rawConnection(svc);
  const frame = (type: number, flags: number, stream: number, payload: Buffer) => {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head.writeUInt8(type, 3);
    head.writeUInt8(flags, 4);
    head.writeUInt32BE(stream, 5);
    return Buffer.concat([head, payload]);
  };
  // The preface, an empty SETTINGS, and the start of a header block (":method: GET", indexed) that never ends.
  socket.write(Buffer.concat([Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(0x4, 0, 0, Buffer.alloc(0)), frame(0x1, 0, 1, Buffer.from([0x82]))]));
  socket.resume();
  const closed = await msUntilClosed(socket, 10_000);
  socket.destroy();
  assert.ok(closed >= 1500 && closed < 7000, `closed after ${closed} ms`);
});

s("a body that has not come by the client's deadline is DEADLINE_EXCEEDED at that deadline, before REQUEST_BODY_TIMEOUT_MS", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  try {
    const started = Date.now();
    const req = session.request({ ":method": "POST", ":path": confirmPath, "content-type": "application/grpc", te: "trailers", "grpc-timeout": "400m", authorization: svc.rest.defaultHeaders["authorization"]! });
    req.write(frame(10).subarray(0, 3)); // part of a frame header, then nothing
    const status = await grpcStatusOf(req);
    const ms = Date.now() - started;
    assert.is(status, "4", "DEADLINE_EXCEEDED");
    assert.ok(ms < 1_400, `answered after ${ms} ms, not at REQUEST_BODY_TIMEOUT_MS (1500)`);
  } finally {
    session.destroy();
  }
});

s("HTTP/2: a REST GET whose headers leave a body open that never comes is answered REQUEST_BODY_TIMEOUT, or DEADLINE_EXCEEDED at its client's deadline", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  try {
    const ask = async (headers: Record<string, string>) => {
      const started = Date.now();
      const req = session.request({ ":method": "GET", ":path": "/api/entities/never-ends/versions", authorization: svc.rest.defaultHeaders["authorization"]!, ...headers }, { endStream: false });
      const { status, text } = await answerOf(req);
      return { status, code: (JSON.parse(text) as { code: string }).code, ms: Date.now() - started };
    };
    const timedOut = await ask({});
    assert.equal([timedOut.status, timedOut.code], [408, "REQUEST_BODY_TIMEOUT"]);
    assert.ok(timedOut.ms >= 1_400, `answered after ${timedOut.ms} ms, at REQUEST_BODY_TIMEOUT_MS (1500)`);
    const deadline = await ask({ "grpc-timeout": "400m" });
    assert.equal([deadline.status, deadline.code], [504, "DEADLINE_EXCEEDED"]);
    assert.ok(deadline.ms < 1_400, `answered after ${deadline.ms} ms, at the client's deadline`);
  } finally {
    session.destroy();
  }
});

s("a bidirectional stream (reflection) ends at its client's deadline while it waits for the next request; without one, at REQUEST_BODY_TIMEOUT_MS, since its bytes count until it ends", async ({ svc }) => {
  const listServices = Buffer.from([0x3a, 1, 0x2a]); // ServerReflectionRequest{list_services: "*"}
  const request = Buffer.concat([Buffer.from([0, 0, 0, 0, listServices.length]), listServices]);
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  const open = (headers: Record<string, string>) => {
    const req = session.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers", ...headers });
    let answers = 0;
    req.on("data", () => answers++);
    req.write(request);
    return { answers: () => answers, status: grpcStatusOf(req) };
  };
  try {
    let started = Date.now();
    const bounded = open({ "grpc-timeout": "500m" });
    assert.is(await bounded.status, "4", "DEADLINE_EXCEEDED");
    assert.ok(Date.now() - started < 1_400, `ended after ${Date.now() - started} ms`);
    assert.ok(bounded.answers() > 0, "its request answered first");
    started = Date.now();
    const unbounded = open({});
    assert.is(await unbounded.status, "4");
    const ms = Date.now() - started;
    assert.ok(ms >= 1_400 && ms < 3_500, `ended after ${ms} ms`);
  } finally {
    session.destroy();
  }
});

s("a session whose only stream is a quiet health Watch is not idle: it stays open, and the Watch goes on, past HTTP_IDLE_TIMEOUT_MS", async ({ svc }) => {
  const session = http2.connect(svc.url);
  session.on("error", () => {});
  let closed = false;
  session.once("close", () => (closed = true));
  const watch = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
  let status: string | undefined;
  let messages = 0;
  watch.on("data", () => messages++);
  watch.on("trailers", (h) => (status = String(h["grpc-status"])));
  watch.on("error", () => {});
  // An empty HealthCheckRequest: the server's own status.
  watch.end(Buffer.from([0, 0, 0, 0, 0]));
  try {
    // Two idle timeouts and more, with nothing to send after the first status.
    await sleep(5_000);
    assert.equal([closed, watch.closed, status, messages], [false, false, undefined, 1], "the session and its Watch are open, the Watch answered once");
    // Once the Watch ends, the session is idle again, and closed.
    watch.close(http2.constants.NGHTTP2_CANCEL);
    await sleep(4_500);
    assert.ok(closed, "closed once idle");
  } finally {
    session.destroy();
  }
});


// A connection whose budget is its largest request (MAX_CONNECTION_BUFFERED_BYTES
// at its least, MAX_REQUEST_BYTES), holding a health Watch whose small
// gzip message inflated to its limit of 16 KiB: a message a thousand bytes
// on the wire (or in a Connect GET's URL) that inflates to just under
// MAX_REQUEST_BYTES is past what the connection may hold, and is refused
// as it inflates, on every protocol that takes a compressed message. Not
// charged, each would be served: this is what fails if inflation stops
// being counted. Both ways of RPC_INFLATION_SCOPE: only calls that name a
// coding run in the charging scope (compressed, the default), or all.
const scopes = ["compressed", "all"] as const;
const inflation = suite<{ services: Record<(typeof scopes)[number], Spawned>; dbs: TestDatabase[] }>("limits: what a compressed message inflates to counts against its connection's budget");
const tight = 1024 * 1024;

inflation.before(async (ctx) => {
  ctx.dbs = [];
  const services: Partial<Record<(typeof scopes)[number], Spawned>> = {};
  for (const scope of scopes) {
    const db = await createTestDatabase("sqlite");
    ctx.dbs.push(db);
    services[scope] = await spawnService(await serviceEnv(db, { MAX_REQUEST_BYTES: String(tight), MAX_CONNECTION_BUFFERED_BYTES: String(tight), RPC_INFLATION_SCOPE: scope }), db);
  }
  ctx.services = services as Record<(typeof scopes)[number], Spawned>;
});
inflation.after(async (ctx) => {
  for (const svc of Object.values(ctx.services ?? {})) await svc.close();
  for (const db of ctx.dbs ?? []) await db.drop();
});

/** `head` (a message's known fields) with an unknown field 99 padding it to `size` bytes once inflated, gzipped. */
function inflatingMessage(head: Buffer, size: number): Buffer {
  const padding = size - head.length - 8;
  const varint: number[] = [];
  for (let n = padding; ; n >>>= 7) {
    if (n < 128) {
      varint.push(n);
      break;
    }
    varint.push((n & 127) | 128);
  }
  return gzipSync(Buffer.concat([head, Buffer.from([0x9a, 0x06, ...varint]), Buffer.alloc(padding)]));
}

/** The ErrorInfo reasons in a google.rpc.Status's details (gRPC's grpc-status-details-bin, or Connect's JSON details). */
function reasonsIn(details: Array<{ type: string; value: string }>): string[] {
  return details.filter((d) => d.type === ErrorInfoSchema.typeName).map((d) => fromBinary(ErrorInfoSchema, Buffer.from(d.value, "base64")).reason);
}

/** A gRPC message's frame: its compressed flag, length and bytes. */
function grpcFrame(body: Buffer, compressed: boolean): Buffer {
  const framed = Buffer.concat([Buffer.from([compressed ? 1 : 0]), Buffer.alloc(4), body]);
  framed.writeUInt32BE(body.length, 1);
  return framed;
}

const getActiveVersion = "/entityversions.v1.EntityVersionsService/GetActiveVersion";
const missing = Buffer.from("\x0a\x07missing", "latin1"); // {entity_id: "missing"}

/** A gRPC call's answer: its status, message, ErrorInfo reasons and messages' bytes. */
function grpcAnswer(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, framed: Buffer) {
  return new Promise<{ status: string; message: string; reasons: string[]; body: string }>((resolve) => {
    const req = session.request({ ":path": getActiveVersion, ":method": "POST", "content-type": "application/grpc", te: "trailers", ...headers });
    let status = "no status";
    let message = "";
    let reasons: string[] = [];
    let body = "";
    const read = (h: http2.IncomingHttpHeaders) => {
      if (h["grpc-status"] !== undefined) status = String(h["grpc-status"]);
      if (h["grpc-message"] !== undefined) message = decodeURIComponent(String(h["grpc-message"]));
      const bin = h["grpc-status-details-bin"];
      if (typeof bin === "string") reasons = reasonsIn(fromBinary(StatusSchema, Buffer.from(bin, "base64")).details.map((d) => ({ type: d.typeUrl.replace(/^.*\//, ""), value: Buffer.from(d.value).toString("base64") })));
    };
    req.on("response", read);
    req.on("trailers", read);
    req.on("data", (d: Buffer) => (body += d.toString("base64")));
    req.on("error", () => {});
    req.on("close", () => resolve({ status, message, reasons, body }));
    req.end(framed);
  });
}

/** A Connect call's answer: its HTTP status, content type, body, and the ErrorInfo reasons of an error's JSON. */
async function connectAnswer(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body: Buffer | undefined) {
  const req = session.request({ "connect-protocol-version": "1", ...headers });
  let contentType = "";
  req.on("response", (h) => (contentType = String(h["content-type"])));
  req.end(body);
  const { status, text } = await answerOf(req);
  const reasons = contentType.startsWith("application/json") && status !== 200 ? reasonsIn((JSON.parse(text) as { details?: Array<{ type: string; value: string }> }).details ?? []) : [];
  return { status, contentType, text, reasons };
}

const connectUnary = { ":path": getActiveVersion, ":method": "POST", "content-type": "application/proto" };
const connectGet = (message: Buffer, query: string) => ({ ":path": `/entityversions.v1.EntityAccessService/GetEntityAccess?connect=v1&encoding=proto&base64=1${query}&message=${message.toString("base64url")}` });

for (const scope of scopes) {
  inflation(`RPC_INFLATION_SCOPE=${scope}: gRPC, Connect unary and a Connect GET: a small gzip message that inflates past the connection's budget is refused IN_FLIGHT_BYTES_EXCEEDED; the connection then serves the same call uncompressed`, async ({ services }) => {
    const svc = services[scope];
    const gz = inflatingMessage(missing, tight - 64);
    assert.ok(gz.length < 1200, `${gz.length} bytes on the wire`);
    const session = http2.connect(svc.url);
    session.on("error", () => {});
    const auth = svc.rest.defaultHeaders;
    // HealthCheckRequest{service: ""}, inflating to 16 KiB less a little.
    const watch = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip" });
    watch.on("error", () => {});
    try {
      const served = new Promise<boolean>((resolve) => {
        watch.once("data", () => resolve(true));
        watch.once("close", () => resolve(false));
      });
      watch.end(grpcFrame(inflatingMessage(Buffer.alloc(0), 16 * 1024 - 64), true));
      assert.ok(await served, "the Watch is answered, and stays open holding what its message inflated to");
      const pick = ({ status, reasons }: { status: string | number; reasons: string[] }) => ({ status, reasons });
      // gRPC: RESOURCE_EXHAUSTED, its reason in grpc-status-details-bin; a coding's name in any letter case.
      for (const coding of ["gzip", "GZIP"]) {
        assert.equal(pick(await grpcAnswer(session, { "grpc-encoding": coding, ...auth }, grpcFrame(gz, true))), { status: "8", reasons: ["IN_FLIGHT_BYTES_EXCEEDED"] }, `gRPC, grpc-encoding: ${coding}`);
      }
      assert.equal(pick(await grpcAnswer(session, auth, grpcFrame(missing, false))), { status: "5", reasons: ["ENTITY_NOT_FOUND"] }, "what it took is given back: the same call uncompressed is served");
      // Connect: 429, its reason in the JSON error's details.
      assert.equal(pick(await connectAnswer(session, { ...connectUnary, "content-encoding": "gzip", ...auth }, gz)), { status: 429, reasons: ["IN_FLIGHT_BYTES_EXCEEDED"] }, "Connect unary, content-encoding: gzip");
      assert.equal(pick(await connectAnswer(session, { ...connectUnary, ...auth }, missing)), { status: 404, reasons: ["ENTITY_NOT_FOUND"] });
      // A GET's message comes in its URL, not its body: only what it inflates to is charged, past what the Watch left.
      assert.equal(pick(await connectAnswer(session, { ...connectGet(gz, "&compression=gzip"), ...auth }, undefined)), { status: 429, reasons: ["IN_FLIGHT_BYTES_EXCEEDED"] }, "Connect GET, compression=gzip");
      assert.equal(pick(await connectAnswer(session, { ...connectGet(missing, ""), ...auth }, undefined)), { status: 404, reasons: ["ENTITY_NOT_FOUND"] });
    } finally {
      watch.close(http2.constants.NGHTTP2_CANCEL);
      session.destroy();
    }
  });
}

for (const scope of scopes) {
  inflation(`RPC_INFLATION_SCOPE=${scope}: a bidi stream's later compressed messages (reflection's, read as its answer is written) are charged as its first is: each answered, until what they hold passes the budget`, async ({ services }) => {
    const session = http2.connect(services[scope].url);
    session.on("error", () => {});
    // ServerReflectionRequest{list_services: ""}, inflating to 16 KiB less a little.
    const listServices = grpcFrame(inflatingMessage(Buffer.from([0x3a, 0x00]), 16 * 1024 - 64), true);
    const stream = session.request({ ":method": "POST", ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip" });
    stream.on("error", () => {});
    try {
      let answers = 0;
      let status: string | undefined;
      let reasons: string[] = [];
      let answered: () => void = () => {};
      const read = (h: http2.IncomingHttpHeaders) => {
        if (h["grpc-status"] === undefined) return;
        status = String(h["grpc-status"]);
        const bin = h["grpc-status-details-bin"];
        if (typeof bin === "string") reasons = reasonsIn(fromBinary(StatusSchema, Buffer.from(bin, "base64")).details.map((d) => ({ type: d.typeUrl.replace(/^.*\//, ""), value: Buffer.from(d.value).toString("base64") })));
        answered();
      };
      stream.on("response", read);
      stream.on("trailers", read);
      stream.on("close", () => answered());
      stream.on("data", () => {
        answers++;
        answered();
      });
      // One message at a time, each sent once the one before is answered (a tool's way).
      for (let sent = 0; sent < 100 && status === undefined; sent++) {
        const next = new Promise<void>((resolve) => (answered = resolve));
        stream.write(listServices);
        await next;
      }
      assert.equal({ status, reasons }, { status: "8", reasons: ["IN_FLIGHT_BYTES_EXCEEDED"] }, `after ${answers} answers`);
      assert.ok(answers >= 2 && answers <= tight / (16 * 1024 - 64), `${answers} messages of 16 KiB answered within a budget of 1 MiB`);
    } finally {
      stream.close(http2.constants.NGHTTP2_CANCEL);
      session.destroy();
    }
  });
}

inflation("RPC_INFLATION_SCOPE=compressed and all answer uncompressed calls, and messages flagged compressed under identity, alike", async ({ services }) => {
  const answers = await Promise.all(
    scopes.map(async (scope) => {
      const svc = services[scope];
      const auth = svc.rest.defaultHeaders;
      const session = http2.connect(svc.url);
      session.on("error", () => {});
      const notUtf8 = Buffer.from('{"entityId": "bad \xff"}', "latin1");
      try {
        return {
          grpc: await grpcAnswer(session, auth, grpcFrame(missing, false)),
          grpcIdentity: await grpcAnswer(session, { "grpc-encoding": "identity", ...auth }, grpcFrame(missing, false)),
          grpcFlaggedIdentity: await grpcAnswer(session, { "grpc-encoding": "identity", ...auth }, grpcFrame(gzipSync(missing), true)),
          grpcFlaggedNone: await grpcAnswer(session, auth, grpcFrame(gzipSync(missing), true)),
          connect: await connectAnswer(session, { ...connectUnary, ...auth }, missing),
          connectIdentity: await connectAnswer(session, { ...connectUnary, "content-encoding": "Identity", ...auth }, missing),
          connectJson: await connectAnswer(session, { ...connectUnary, "content-type": "application/json", ...auth }, Buffer.from('{"entityId": "missing"}')),
          connectNotUtf8: await connectAnswer(session, { ...connectUnary, "content-type": "application/json", ...auth }, notUtf8),
          connectNotUtf8Gzip: await connectAnswer(session, { ...connectUnary, "content-type": "application/json", "content-encoding": "gzip", ...auth }, gzipSync(notUtf8)),
          get: await connectAnswer(session, { ...connectGet(missing, ""), ...auth }, undefined),
          getIdentity: await connectAnswer(session, { ...connectGet(missing, "&compression=identity"), ...auth }, undefined),
        };
      } finally {
        session.destroy();
      }
    }),
  );
  const [compressed, all] = answers as [(typeof answers)[number], (typeof answers)[number]];
  assert.equal(compressed, all);
  assert.equal([compressed.grpc.status, compressed.connect.status, compressed.get.status], ["5", 404, 404], "served (NOT_FOUND)");
  assert.is.not(compressed.grpcFlaggedIdentity.status, "0", JSON.stringify(compressed.grpcFlaggedIdentity));
  assert.not.equal(compressed.grpcFlaggedIdentity.reasons, ["INTERNAL"], "a message flagged compressed without a coding is the client's error, not one that came uncharged");
  assert.is(compressed.connectNotUtf8Gzip.status, 400, JSON.stringify(compressed.connectNotUtf8Gzip));
});

inflation.run();

s("HTTP/2: a request with neither :authority nor Host is reset PROTOCOL_ERROR by the HTTP/2 layer, never run", async ({ svc }) => {
  const h2 = await RawH2.connect(svc.url);
  try {
    h2.request(1, [[":method", "POST"], [":scheme", "http"], [":path", "/grpc.health.v1.Health/Check"], ["content-type", "application/json"]], "{}");
    const reset = (frames: readonly RawFrame[]) => frames.find((f) => f.stream === 1 && f.type === frameType.rstStream);
    assert.ok(await h2.until((frames) => reset(frames) !== undefined), JSON.stringify(h2.frames.map((f) => [f.stream, f.type, f.flags])));
    assert.is(reset(h2.frames)!.payload.readUInt32BE(0), 1, "PROTOCOL_ERROR (RFC 9113, 7)");
    assert.equal(h2.on(1).filter((f) => f.type === frameType.headers || f.type === frameType.data), [], "no answer: nothing ran");
  } finally {
    h2.close();
  }
});

s("HTTP/2 rapid reset: a connection that sends health Checks and resets each before its answer is closed (GOAWAY ENHANCE_YOUR_CALM) long before its 1,000 are run, logged once with its address; others are served", async ({ svc }) => {
  const logged = () => svc.stdout().split("\n").filter((line) => line.includes("rapid reset")).length;
  const before = logged();
  const h2 = await RawH2.connect(svc.url);
  try {
    for (let i = 0; i < 1_000; i++) {
      const stream = 2 * i + 1;
      h2.request(stream, [[":method", "POST"], [":scheme", "http"], [":path", "/grpc.health.v1.Health/Check"], [":authority", "x"], ["content-type", "application/grpc"], ["te", "trailers"]], undefined);
      h2.reset(stream);
    }
    const goaway = (frames: readonly RawFrame[]) => frames.find((f) => f.type === frameType.goaway);
    assert.ok(await h2.until((frames) => goaway(frames) !== undefined, 10_000), "the connection gets GOAWAY");
    assert.is(goaway(h2.frames)!.payload.readUInt32BE(4), 11, "ENHANCE_YOUR_CALM");
    // The last stream it took: the default burst (HTTP2_MAX_CONCURRENT_STREAMS, 100) and what refilled as they were read.
    assert.ok(goaway(h2.frames)!.payload.readUInt32BE(0) < 1_999, `last stream ${goaway(h2.frames)!.payload.readUInt32BE(0)} of 1,999`);
    for (let i = 0; i < 50 && logged() === before; i++) await sleep(20);
    assert.is(logged() - before, 1, "one warning");
    assert.match(svc.stdout().split("\n").find((line) => line.includes("rapid reset"))!, /"peer":"(::ffff:)?127\.0\.0\.1"/);
    const other = http2.connect(svc.url);
    other.on("error", () => {});
    const check = other.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
    check.end(Buffer.alloc(5));
    assert.is(await grpcStatusOf(check), "0", "another connection is served");
    other.close();
  } finally {
    h2.close();
  }
});

s.run();

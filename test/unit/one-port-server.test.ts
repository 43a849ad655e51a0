// The one-port server's HTTP/1.1 side, on a real socket: answers queued
// behind another on a connection that dies still close, so that whatever
// waits for them (a call's place at the gate, its log line) is let go.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { createOnePortServer, type RequestHandler } from "../../src/net/one-port-server.js";
import { frameType, RawH2 } from "../support/raw-h2.js";

test("pipelined answers still queued when their connection dies are closed, each once", async () => {
  const closes = new Map<string, number>();
  const server = createOnePortServer(
    (req, res) => {
      const key = (req as { url?: string }).url ?? "";
      res.once("close", () => closes.set(key, (closes.get(key) ?? 0) + 1));
      // Answered after the client has gone.
      setTimeout(() => res.end("x"), 300);
    },
    { idleTimeoutMs: 5_000 },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const socket = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write(["/a", "/b", "/c"].map((p) => `GET ${p} HTTP/1.1\r\nHost: x\r\n\r\n`).join(""));
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 800));
    assert.equal(Object.fromEntries(closes), { "/a": 1, "/b": 1, "/c": 1 });
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

/** A one-port server whose refusals of unreadable requests say what they were, and a raw connection to it. */
async function refusingServer(handler: RequestHandler) {
  const server = createOnePortServer(handler, {
    idleTimeoutMs: 10_000,
    // The request the handler had, if any, by its URL.
    unreadable: (request) => ({ status: request.kind === "too-large" ? 431 : 400, headers: {}, body: { ...request, ...("request" in request ? { request: request.request?.url } : {}) } }),
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const connect = async (allowHalfOpen = false) => {
    const socket = net.connect({ port: (server.address() as net.AddressInfo).port, host: "127.0.0.1", allowHalfOpen });
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    let got = "";
    socket.on("data", (d: Buffer) => (got += d.toString()));
    const started = Date.now();
    // -1 when still open after 6 s.
    const closed = Promise.race([
      new Promise<number>((resolve) => socket.once("close", () => resolve(Date.now() - started))),
      new Promise<number>((resolve) => setTimeout(() => resolve(-1), 6_000).unref()),
    ]);
    return { socket, closed, got: () => got };
  };
  return { connect, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

test("a request the parser refuses once its answer has begun gets no second answer on its connection: the connection is cut", async () => {
  const server = await refusingServer((req, res) => {
    const h1 = res as http.ServerResponse;
    h1.writeHead(200, { "content-type": "text/plain" });
    h1.write("begun");
    req.resume();
  });
  try {
    const client = await server.connect();
    client.socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Not a chunk size.
    client.socket.write("zz\r\n");
    await client.closed;
    assert.match(client.got(), /^HTTP\/1\.1 200 /);
    assert.match(client.got(), "begun");
    assert.not.match(client.got(), "HTTP/1.1 400");
  } finally {
    await server.close();
  }
});

test("a request whose chunked body cannot be read while its handler still reads it, unanswered, gets the refusal, which says its body's framing is at fault: the one answer it gets", async () => {
  const server = await refusingServer((req) => req.resume());
  try {
    const client = await server.connect();
    client.socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n");
    await sleep(200);
    client.socket.write("zz\r\n");
    assert.ok((await client.closed) >= 0, "the connection is closed");
    assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, client.got());
    assert.match(client.got(), /^HTTP\/1\.1 400 [^]*\{"kind":"malformed","problem":"its body's chunked framing is not valid as RFC 9112 \(7\.1\) writes it \(Invalid character in chunk size\)","request":"\/"\}$/, client.got());
  } finally {
    await server.close();
  }
});

test("a request answered (keep-alive) before its chunked body was read gets no second answer when its body then cannot be read (a bad chunk, or its client's half-close): the connection is cut", async () => {
  const server = await refusingServer((_req, res) => (res as http.ServerResponse).end("early"));
  try {
    for (const [label, then] of [
      ["a bad chunk size", (socket: net.Socket) => socket.write("zz\r\n")],
      ["a half-close mid-body", (socket: net.Socket) => socket.end()],
    ] as const) {
      // Half-open allowed, so that its half-close leaves it open to read what follows.
      const client = await server.connect(label === "a half-close mid-body");
      client.socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n");
      for (let i = 0; i < 50 && !client.got().includes("early"); i++) await sleep(20);
      assert.match(client.got(), /keep-alive[^]*early$/i, `${label}: answered before the body`);
      then(client.socket);
      assert.ok((await client.closed) >= 0, `${label}: the connection is closed`);
      assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${label}: ${client.got()}`);
    }
  } finally {
    await server.close();
  }
});

test("an unreadable request is answered once, and a client that sends on after its answer is cut within seconds, not held", async () => {
  const server = await refusingServer(() => assert.unreachable("no request reaches the handler"));
  try {
    const client = await server.connect(true);
    client.socket.write(`GET /${"x".repeat(20_000)}`);
    const trickle = setInterval(() => client.socket.write("x".repeat(100)), 50);
    const ms = await client.closed;
    clearInterval(trickle);
    client.socket.destroy();
    assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, client.got());
    assert.match(client.got(), /^HTTP\/1\.1 431 [^]*\r\n\r\n\{"kind":"too-large","limitBytes":16384\}$/);
    assert.ok(ms > 1_000 && ms < 5_000, `${ms} ms`);
  } finally {
    await server.close();
  }
});

test("a bad request pipelined behind a complete one still being answered is not answered (the client would take the refusal for the first one's answer): the first one's answer is sent, with Connection: close, then the connection is closed", async () => {
  let reached = 0;
  const server = await refusingServer((req, res) => {
    reached++;
    req.resume();
    // Still working on it when the bad request behind it is read.
    setTimeout(() => (res as http.ServerResponse).end("done"), 500);
  });
  try {
    const client = await server.connect();
    client.socket.write("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" + "GET /b HTTP/1.1\r\nHost: x\r\nBad header\r\n\r\n");
    const ms = await client.closed;
    assert.ok(ms >= 0, "the connection is closed");
    assert.is(reached, 1, "the first request reached the handler");
    assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, client.got());
    assert.match(client.got(), /^HTTP\/1\.1 200 [^]*connection: close[^]*\r\n\r\ndone$/i, client.got());
  } finally {
    await server.close();
  }
});

test("a bad request pipelined behind an answer whose head went out keep-alive: that answer is sent whole, then the connection is closed", async () => {
  const server = await refusingServer((req, res) => {
    req.resume();
    const answer = res as http.ServerResponse;
    answer.writeHead(200, { "content-type": "text/plain" });
    answer.write("first,");
    setTimeout(() => answer.end("last"), 500);
  });
  try {
    const client = await server.connect();
    client.socket.write("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    for (let i = 0; i < 50 && !client.got().includes("first,"); i++) await sleep(20);
    assert.match(client.got(), /keep-alive/i, "the head went out before the bad request");
    client.socket.write("GET /b HTTP/1.1\r\nHost: x\r\nBad header\r\n\r\n");
    const ms = await client.closed;
    assert.ok(ms >= 0 && ms < 3_000, `closed after ${ms} ms`);
    assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, client.got());
    assert.match(client.got(), /last\r\n0\r\n\r\n$/, "the answer in full");
  } finally {
    await server.close();
  }
});

test("a request pipelined behind the refusal of one without Host, or with a Host that is not one, is not run: its client sees the refusal and the close, and may send it again", async () => {
  const ran: string[] = [];
  const server = await refusingServer((req, res) => {
    ran.push((req as http.IncomingMessage).url ?? "");
    (res as http.ServerResponse).end("ran");
  });
  try {
    for (const [label, head] of [
      ["no Host", "GET /first HTTP/1.1\r\n\r\n"],
      ["a Host that is not one", "GET /first HTTP/1.1\r\nHost: a b\r\n\r\n"],
    ] as const) {
      ran.length = 0;
      const client = await server.connect();
      client.socket.write(head + "POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
      assert.ok((await client.closed) >= 0, `${label}: the connection is closed`);
      assert.equal(ran, [], label);
      assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${label}: ${client.got()}`);
      assert.match(client.got(), /^HTTP\/1\.1 400 [^]*connection: close/i, label);
    }
  } finally {
    await server.close();
  }
});

test("a chunked body that breaks behind a complete request still being answered: that answer is sent whole (its head not yet out, or out keep-alive), the broken one never answered, then the connection is closed", async () => {
  for (const headFirst of [false, true]) {
    const server = await refusingServer((req, res) => {
      req.resume();
      const answer = res as http.ServerResponse;
      if ((req as http.IncomingMessage).url !== "/a") return;
      if (headFirst) answer.writeHead(200, { "content-type": "text/plain" }).write("first,");
      setTimeout(() => answer.end("done"), 400);
    });
    const label = headFirst ? "its head out keep-alive" : "its head not yet out";
    try {
      const client = await server.connect();
      client.socket.write("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n");
      await sleep(100);
      // Not a chunk size.
      client.socket.write("zz\r\n");
      const ms = await client.closed;
      assert.ok(ms >= 0 && ms < 3_000, `${label}: closed after ${ms} ms`);
      assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${label}: ${client.got()}`);
      assert.match(client.got(), /^HTTP\/1\.1 200 /, `${label}: ${client.got()}`);
      assert.match(client.got(), headFirst ? /keep-alive[^]*done\r\n0\r\n\r\n$/i : /connection: close[^]*done$/i, `${label}: ${client.got()}`);
    } finally {
      await server.close();
    }
  }
});

test("a chunked body that breaks behind a complete request still being answered, its own answer made before its body was read (a call refused from its headers): both answers are sent, in order, then the connection is closed", async () => {
  const server = await refusingServer((req, res) => {
    const answer = res as http.ServerResponse;
    if ((req as http.IncomingMessage).url === "/a") {
      req.resume();
      setTimeout(() => answer.end("done"), 400);
      return;
    }
    answer.shouldKeepAlive = false;
    answer.writeHead(401).end("refused");
  });
  try {
    const client = await server.connect();
    client.socket.write("PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    await sleep(100);
    // Not a chunk size.
    client.socket.write("zz\r\n");
    const ms = await client.closed;
    assert.ok(ms >= 0 && ms < 3_000, `closed after ${ms} ms`);
    assert.match(client.got(), /^HTTP\/1\.1 200 [^]*done(HTTP\/1\.1 401 [^]*refused[^]*)$/, client.got());
    assert.is(client.got().match(/HTTP\/1\.1 \d{3} /g)?.length, 2, client.got());
  } finally {
    await server.close();
  }
});

/** A raw HTTP/1.1 connection to `server` that keeps what it is sent, and when it closed. */
async function rawConnection(server: net.Server) {
  const socket = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
  socket.on("error", () => {});
  await new Promise((resolve) => socket.once("connect", resolve));
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
  const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(Date.now())));
  return { socket, received: () => received, closed };
}

const listening = async (server: net.Server) => new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("close: a connection whose request head is unfinished is closed at once; one with a request running is answered, then closed", async () => {
  let ran = 0;
  const server = createOnePortServer(
    (_req, res) => {
      ran++;
      setTimeout(() => res.end("done"), 500);
    },
    { idleTimeoutMs: 60_000, headersTimeoutMs: 60_000 },
  );
  await listening(server);
  const partial = await rawConnection(server);
  const busy = await rawConnection(server);
  partial.socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\n");
  busy.socket.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  await sleep(100);
  const started = Date.now();
  const closed = new Promise<number>((resolve) => server.close(() => resolve(Date.now())));
  try {
    assert.ok((await partial.closed) - started < 300, "the unfinished head is not waited for");
    assert.ok((await closed) - started < 3_000, `closed after ${Date.now() - started} ms`);
    await busy.closed;
    assert.match(busy.received(), /^HTTP\/1\.1 200 /, busy.received());
    assert.match(busy.received(), /connection: close/i);
    assert.match(busy.received(), /done$/);
    assert.is(ran, 1, "the unfinished request never ran");
  } finally {
    partial.socket.destroy();
    busy.socket.destroy();
  }
});

test("close: a keep-alive answer already under way is sent whole, then its connection is closed, not left idle", async () => {
  const server = createOnePortServer(
    (_req, res) => {
      const answer = res as http.ServerResponse;
      answer.writeHead(200, { "content-type": "text/plain" });
      answer.write("first,");
      setTimeout(() => res.end("last"), 500);
    },
    { idleTimeoutMs: 60_000 },
  );
  await listening(server);
  const client = await rawConnection(server);
  client.socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  for (let i = 0; i < 50 && !client.received().includes("first,"); i++) await sleep(20);
  assert.match(client.received(), /keep-alive/i, "the head went out before the close");
  const started = Date.now();
  const closed = new Promise<number>((resolve) => server.close(() => resolve(Date.now())));
  try {
    assert.ok((await client.closed) - started < 3_000, `connection closed after ${Date.now() - started} ms (the idle timeout is 60 s)`);
    assert.match(client.received(), /last\r\n0\r\n\r\n$/, "the answer in full");
    assert.ok((await closed) - started < 3_000);
  } finally {
    client.socket.destroy();
  }
});

/** A server whose handler answers /slow… after 300 ms and anything else at once, and the paths it ran. */
async function recordingServer() {
  const ran: string[] = [];
  const server = createOnePortServer(
    (req, res) => {
      const url = (req as http.IncomingMessage).url ?? "";
      ran.push(url);
      setTimeout(() => res.end(`answer ${url}`), url.startsWith("/slow") ? 300 : 0);
    },
    { idleTimeoutMs: 60_000 },
  );
  await listening(server);
  return { server, ran };
}

const post = (path: string) => `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`;

test("drain, close: a request pipelined behind an answer that will close its connection is not run: its client sees one answer and the close, and may send it again", async () => {
  for (const stop of ["drain", "close"] as const) {
    const { server, ran } = await recordingServer();
    const client = await rawConnection(server);
    client.socket.write(post("/slow"));
    await sleep(100);
    const closed = stop === "drain" ? (server.drain(), undefined) : new Promise<void>((resolve) => server.close(() => resolve()));
    client.socket.write(post("/second"));
    await client.closed;
    try {
      assert.equal(ran, ["/slow"], stop);
      assert.is(client.received().match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${stop}: ${client.received()}`);
      assert.match(client.received(), /connection: close[^]*answer \/slow$/i, stop);
    } finally {
      if (closed === undefined) server.close();
      else await closed;
    }
  }
});

test("drain, close: requests pipelined before it are all answered, the connection closed after the last", async () => {
  for (const stop of ["drain", "close"] as const) {
    const { server, ran } = await recordingServer();
    const client = await rawConnection(server);
    client.socket.write(post("/slow") + post("/slow-second"));
    await sleep(100);
    const closed = stop === "drain" ? (server.drain(), undefined) : new Promise<void>((resolve) => server.close(() => resolve()));
    await client.closed;
    try {
      assert.equal(ran, ["/slow", "/slow-second"], stop);
      const [first, second] = client.received().split(/(?=HTTP\/1\.1 )/);
      assert.match(first ?? "", /^HTTP\/1\.1 200 [^]*keep-alive[^]*answer \/slow$/i, `${stop}: ${client.received()}`);
      assert.match(second ?? "", /^HTTP\/1\.1 200 [^]*connection: close[^]*answer \/slow-second$/i, `${stop}: ${client.received()}`);
    } finally {
      if (closed === undefined) server.close();
      else await closed;
    }
  }
});

test("drain: a connection partway through sending a request head is not closed as quiet, however slowly it sends; one idle after its answer is", async () => {
  const server = createOnePortServer((_req, res) => res.end("ok"), { idleTimeoutMs: 60_000, headersTimeoutMs: 60_000 });
  await listening(server);
  const idle = await rawConnection(server);
  const slow = await rawConnection(server);
  try {
    idle.socket.write(`POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}`);
    for (let i = 0; i < 50 && !idle.received().endsWith("ok"); i++) await sleep(20);
    slow.socket.write("POST /upload HTTP/1.1\r\nHost: x\r\n");
    server.drain();
    const started = Date.now();
    await sleep(1_800);
    assert.ok((await Promise.race([idle.closed, sleep(0).then(() => 0)])) > 0, "the idle connection is closed");
    assert.ok((await Promise.race([slow.closed, sleep(0).then(() => 0)])) === 0, `the one sending a head is open after ${Date.now() - started} ms`);
    slow.socket.write("Content-Length: 0\r\n\r\n");
    await slow.closed;
    assert.match(slow.received(), /^HTTP\/1\.1 200 [^]*connection: close[^]*ok$/i, slow.received());
  } finally {
    idle.socket.destroy();
    slow.socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

/** A one-port server whose every request is worked on for `answerMs` before its answer (50 ms, as a health Check's), counting the requests begun and the sessions closed for their resets. */
async function resetCountingServer(resets?: { resetBurst?: number; resetsPerSecond?: number }, answerMs = 50) {
  let begun = 0;
  const floods: Array<string | undefined> = [];
  const server = createOnePortServer(
    (_req, res) => {
      begun++;
      setTimeout(() => {
        if (!res.writableEnded && !res.destroyed) res.end("ok");
      }, answerMs);
    },
    { idleTimeoutMs: 10_000, ...(resets === undefined ? {} : { resets }), onResetFlood: (peer) => floods.push(peer.address) },
  );
  await listening(server);
  return { server, url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, begun: () => begun, floods };
}

const healthCheck = [
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/grpc.health.v1.Health/Check"],
  [":authority", "x"],
  ["content-type", "application/grpc"],
  ["te", "trailers"],
] as const;

test("HTTP/2 rapid reset: a session whose client resets stream after stream before their answers is closed, GOAWAY ENHANCE_YOUR_CALM, long before all its streams are begun, and logged once", async () => {
  const { server, url, begun, floods } = await resetCountingServer();
  const h2 = await RawH2.connect(url);
  try {
    // 1,000 HEADERS+RST_STREAM pairs, each stream's work begun by the server.
    for (let i = 0; i < 1_000; i++) {
      const stream = 2 * i + 1;
      h2.request(stream, healthCheck, undefined);
      h2.reset(stream);
    }
    const goaway = (frames: readonly { type: number }[]) => frames.find((f) => f.type === frameType.goaway);
    assert.ok(await h2.until((frames) => goaway(frames) !== undefined, 10_000), "the session gets GOAWAY");
    const frame = h2.frames.find((f) => f.type === frameType.goaway)!;
    assert.is(frame.payload.readUInt32BE(4), 11, "ENHANCE_YOUR_CALM");
    // The default burst is the session's advertised concurrent streams (100).
    assert.ok(begun() < 300, `${begun()} of 1,000 streams begun`);
    assert.equal(floods, ["127.0.0.1"]);
  } finally {
    h2.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test("HTTP/2 rapid reset: a client whose many calls in flight each reach their deadline on a slow server (cancelled 150 ms after they begin, 600 a second) keeps its session", async () => {
  const { server, url, floods } = await resetCountingServer(undefined, 1_000);
  const session = http2.connect(url);
  session.on("error", () => {});
  let goaway: number | undefined;
  session.on("goaway", (code) => (goaway = code));
  try {
    const until = Date.now() + 1_500;
    let cancelled = 0;
    const caller = async () => {
      while (Date.now() < until) {
        const req = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
        req.on("error", () => {});
        req.end();
        await sleep(150);
        req.close(http2.constants.NGHTTP2_CANCEL);
        cancelled++;
      }
    };
    await Promise.all(Array.from({ length: 90 }, caller));
    await sleep(100);
    assert.ok(cancelled > 500, `${cancelled} calls cancelled`);
    assert.is(goaway, undefined);
    assert.equal(floods, []);
  } finally {
    session.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test("HTTP/2 rapid reset: a client that cancels calls now and then keeps its session: the budget refills, it is not a count over the session's life", async () => {
  // A burst of 10, refilled at 20 a second: 20 cancels over 2 s stay well within it, though past a lifetime count of 10.
  const { server, url, begun, floods } = await resetCountingServer({ resetBurst: 10, resetsPerSecond: 20 });
  const session = http2.connect(url);
  session.on("error", () => {});
  let goaway: number | undefined;
  session.on("goaway", (code) => (goaway = code));
  try {
    for (let i = 0; i < 20; i++) {
      const req = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
      req.on("error", () => {});
      // Cancelled once its headers have reached the server and its work begun.
      const before = begun();
      for (let j = 0; j < 50 && begun() === before; j++) await sleep(5);
      req.close(http2.constants.NGHTTP2_CANCEL);
      await sleep(100);
    }
    assert.is(begun(), 20, "each call reached the server");
    const req = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
    let text = "";
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.end();
    await new Promise((resolve) => req.once("close", resolve));
    assert.is(text, "ok", "the session still answers");
    assert.is(goaway, undefined);
    assert.equal(floods, []);
    // The same 20 cancels at once, on another session, are past its burst: the cancels reach the server as resets.
    const hasty = http2.connect(url);
    hasty.on("error", () => {});
    const calmed = new Promise<number>((resolve) => hasty.once("goaway", resolve));
    for (let i = 0; i < 20; i++) {
      const req = hasty.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
      req.on("error", () => {});
      req.on("ready", () => req.close(http2.constants.NGHTTP2_CANCEL));
    }
    assert.is(await Promise.race([calmed, sleep(5_000).then(() => -1)]), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    hasty.destroy();
  } finally {
    session.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test.run();

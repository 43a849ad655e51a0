import http2 from "node:http2";
import net from "node:net";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type Backend, connectTestDatabase, createTestDatabase } from "../support/env.js";
import { grpc } from "../support/grpc-client.js";
import type { RestClient } from "../support/rest.js";
import type { Authenticator } from "../../src/auth/caller.js";
import { JwtAuthenticator } from "../../src/auth/jwt-authenticator.js";
import { memoryLogger, newEntityId, push, serviceEnv, spawnService, startService, type TestService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, testAuth, token } from "../support/tokens.js";
import { type WatchItem, type WatchStream, watchConnect, watchGrpc, watchRest } from "../support/watch-client.js";

const v = (e: string) => `/api/entities/${e}`;

type EventItem = Extract<WatchItem, { kind: "event" }>;
const brief = (e: EventItem) => `${e.id} ${e.type} ${e.versionId}${e.access === "" ? "" : ` ${e.access}`}`;

/** A user's headers, REST client and gRPC client. */
async function user(svc: TestService, sub: string, roles: string[], orgs: string[] = []) {
  const headers = bearer(await token({ sub, roles, orgs }));
  return { headers, rest: svc.restAs(headers), grpc: svc.grpcAs(headers) };
}

/** An entity with a first version made active (events 1 to 3: the claim, the version, its activation). */
async function entityWithVersion(owner: RestClient): Promise<{ e: string; v1: string }> {
  const e = newEntityId("watch");
  const first = await push({ rest: owner }, e, { setAsActive: true });
  assert.is(first.confirm?.status, 201, JSON.stringify(first.confirm?.body));
  return { e, v1: first.confirm!.body.version.id };
}

/**
 * WatchEvents in one process: what a watch sends on every protocol, resume,
 * access, bounds, keep-alives and shutdown. (Across processes: watchReplicasSuite.)
 */
export function watchSuite(backend: Backend) {
  const s = serviceSuite("watch: WatchEvents on every protocol, resume, access, bounds, keep-alives, shutdown", backend);

  s("gRPC, gRPC-Web, Connect and REST: the events after after_event_id, a bookmark, then each new event as it happens, in order, once", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(owner.rest);
    const watches: Record<string, WatchStream> = {
      grpc: watchGrpc(owner.grpc, e, { afterEventId: "1" }),
      rest: watchRest(svc.url, e, owner.headers, { afterEventId: "1", backend }),
      connect: watchConnect(svc.url, "connect", e, owner.headers, { afterEventId: "1" }),
      "grpc-web": watchConnect(svc.url, "grpc-web", e, owner.headers, { afterEventId: "1" }),
    };
    const fromNow = watchGrpc(owner.grpc, e);
    try {
      for (const [protocol, w] of Object.entries(watches)) {
        assert.equal((await w.events(2)).map(brief), [`2 VERSION_CREATED ${v1}`, `3 ACTIVE_VERSION_CHANGED ${v1}`], protocol);
        assert.is(await w.bookmark(), "3", `${protocol}: a bookmark once the replay is done`);
      }
      assert.is(await fromNow.bookmark(), "3", "without after_event_id: only a bookmark of where the entity stands");
      const v2 = (await push({ rest: owner.rest }, e, { base: v1 })).confirm!.body.version.id as string;
      assert.is((await owner.rest.put(`${v(e)}/active-version`, { versionId: v2 })).status, 200);
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      const expected = [`4 VERSION_CREATED ${v2}`, `5 ACTIVE_VERSION_CHANGED ${v2}`, `6 ACCESS_CHANGED  SHARE_ADDED:bob`];
      for (const [protocol, w] of Object.entries({ ...watches, fromNow })) {
        const got = await w.events(3);
        assert.equal(got.map(brief), expected, protocol);
        assert.equal(got[1]!.previousActiveVersionId, v1, protocol);
        assert.equal(got.map((x) => x.actor), ["owner", "owner", "owner"], protocol);
        // Nothing more: no event twice, no bookmark yet (the keep-alive is 15 s).
        assert.equal(w.received.filter((x) => x.kind === "event").length, protocol === "fromNow" ? 3 : 5, protocol);
      }
    } finally {
      for (const w of [...Object.values(watches), fromNow]) w.close();
    }
  });

  s("resuming from any event id sends exactly the events after it, then a bookmark of the last", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(owner.rest);
    let base = v1;
    for (let i = 0; i < 3; i++) base = (await push({ rest: owner.rest }, e, { base })).confirm!.body.version.id;
    const all = (await owner.rest.get(`${v(e)}/events`)).body.events.map((x: { id: string }) => x.id).reverse() as string[];
    assert.equal(all, ["1", "2", "3", "4", "5", "6"]);
    for (const after of ["0", ...all]) {
      const w = after === "3" ? watchRest(svc.url, e, owner.headers, { afterEventId: after, backend }) : watchGrpc(owner.grpc, e, { afterEventId: after });
      try {
        const expected = all.filter((id) => Number(id) > Number(after));
        assert.equal((await w.events(expected.length)).map((x) => x.id), expected, `after ${after}`);
        assert.is(await w.bookmark(), "6", `after ${after}`);
      } finally {
        w.close();
      }
    }
  });

  s("a watch that cannot start is refused before its stream: unknown entity, no access, a bad or unknown after_event_id", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const stranger = await user(svc, "stranger", ["publisher"]);
    const { e } = await entityWithVersion(owner.rest);
    const cases: Array<[WatchStream, WatchStream, number, string]> = [
      [watchGrpc(owner.grpc, newEntityId("missing")), watchRest(svc.url, newEntityId("missing"), owner.headers, { backend }), 404, "ENTITY_NOT_FOUND"],
      [watchGrpc(stranger.grpc, e), watchRest(svc.url, e, stranger.headers, { backend }), 404, "ENTITY_NOT_FOUND"],
      [watchGrpc(owner.grpc, e, { afterEventId: "4" }), watchRest(svc.url, e, owner.headers, { afterEventId: "4", backend }), 400, "INVALID_ARGUMENT"],
      [watchGrpc(owner.grpc, e, { afterEventId: "x1" }), watchRest(svc.url, e, owner.headers, { afterEventId: "-1", backend }), 400, "INVALID_ARGUMENT"],
      [watchGrpc(owner.grpc, "bad.id"), watchRest(svc.url, "bad.id", owner.headers, { backend }), 400, "INVALID_ARGUMENT"],
    ];
    for (const [g, r, status, reason] of cases) {
      const [ge, re] = [await g.ended(), await r.ended()];
      assert.equal([ge.code, ge.reason], [status === 404 ? grpc.status.NOT_FOUND : grpc.status.INVALID_ARGUMENT, reason]);
      assert.equal([re.httpStatus, re.reason], [status, reason]);
      assert.equal([g.received, r.received], [[], []]);
    }
    const unknown = watchGrpc(owner.grpc, e, { afterEventId: "4" });
    assert.match((await unknown.ended()).message, 'is not an event of entity');
  });

  s("a gRPC client's deadline ends its watch; the watch is counted when it ends, not when it starts", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e } = await entityWithVersion(owner.rest);
    const text = async () => (await (await fetch(`${svc.url}/metrics`)).text()).split("\n");
    const counted = async () =>
      (await text())
        .filter((l) => l.startsWith('entity_versions_rpc_requests_total{rpc="entityversions.v1.EntityEventsService/WatchEvents",protocol="grpc"'))
        .reduce((sum, l) => sum + Number(l.split(" ").pop()), 0);
    const open = async () => Number((await text()).find((l) => l.startsWith("entity_versions_watches_open "))?.split(" ")[1]);
    // Earlier tests' watches, closed by their clients, may still be ending.
    for (let waited = 0; (await open()) > 0 && waited < 3_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    const before = await counted();
    const w = watchGrpc(owner.grpc, e, { deadlineMs: 1_000 });
    try {
      assert.is(await w.bookmark(), "3");
      assert.equal([await counted(), await open()], [before, 1], "not counted while it runs");
      assert.is((await w.ended()).code, grpc.status.DEADLINE_EXCEEDED);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal([await counted(), await open()], [before + 1, 0]);
    } finally {
      w.close();
    }
  });

  s("a deadline longer than a timer holds (30 days) is no deadline: the watch stays open, and a unary call runs to its end", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(owner.rest);
    const month = 30 * 24 * 3600 * 1000;
    const w = watchGrpc(owner.grpc, e, { deadlineMs: month });
    try {
      assert.is(await w.bookmark(), "3");
      await new Promise((resolve) => setTimeout(resolve, 300));
      const v2 = (await push({ rest: owner.rest }, e, { base: v1 })).confirm!.body.version.id as string;
      assert.equal((await w.events(1)).map(brief), [`4 VERSION_CREATED ${v2}`]);
      assert.not.ok(w.done, JSON.stringify(w.received));
      // A confirm (over Connect) takes more than the millisecond such a timer would give it.
      const up = await uploadOnly({ rest: owner.rest }, e, { base: v2 });
      const confirmed = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/ConfirmUpload`, {
        method: "POST",
        headers: { ...owner.headers, "content-type": "application/json", "connect-timeout-ms": String(month) },
        body: JSON.stringify({
          entityId: e,
          storagePath: up.res.body.storage_path,
          version: up.version,
          sourceHash: up.sourceHash,
          fileSizeBytes: Buffer.byteLength(up.content),
          baseVersionId: v2,
        }),
      });
      assert.is(confirmed.status, 200, await confirmed.clone().text());
      assert.is(((await confirmed.json()) as { created: boolean }).created, true);
    } finally {
      w.close();
    }
  });

  s("a watch ended by its client's deadline says where to resume: DEADLINE_EXCEEDED naming the last event sent", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e } = await entityWithVersion(owner.rest);
    // Connect streaming by hand: a client library would end the call at its own deadline, before the server's answer.
    const request = Buffer.from(JSON.stringify({ entityId: e }));
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), request]);
    envelope.writeUInt32BE(request.length, 1);
    const res = await fetch(`${svc.url}/entityversions.v1.EntityEventsService/WatchEvents`, {
      method: "POST",
      headers: { ...owner.headers, "content-type": "application/connect+json", "connect-protocol-version": "1", "connect-timeout-ms": "1000" },
      body: envelope,
    });
    const body = Buffer.from(await res.arrayBuffer());
    const messages: Array<{ flags: number; json: any }> = [];
    for (let at = 0; at < body.length; at += 5 + body.readUInt32BE(at + 1)) {
      messages.push({ flags: body[at]!, json: JSON.parse(body.subarray(at + 5, at + 5 + body.readUInt32BE(at + 1)).toString()) });
    }
    const end = messages.at(-1)!;
    assert.is(end.flags & 2, 2, "an end-stream message");
    assert.is(end.json.error.code, "deadline_exceeded");
    assert.match(end.json.error.message, "watch again with after_event_id=3 to miss nothing");
    assert.equal(messages[0]!.json, { bookmark: { lastEventId: "3" } });
  });

  s("HEAD is not a watch: 405 naming GET, and no watch is left open", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const { e } = await entityWithVersion(owner.rest);
    const open = async () => Number((await (await fetch(`${svc.url}/metrics`)).text()).split("\n").find((l) => l.startsWith("entity_versions_watches_open "))?.split(" ")[1]);
    for (let waited = 0; (await open()) > 0 && waited < 3_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    const before = await open();
    for (let i = 0; i < 25; i++) {
      const head = await fetch(`${svc.url}${v(e)}/events:watch`, { method: "HEAD", headers: owner.headers });
      assert.equal([head.status, head.headers.get("allow")], [405, "GET"]);
    }
    assert.is(await open(), before);
    // A read's HEAD still answers as its GET does.
    assert.is((await fetch(`${svc.url}${v(e)}/versions`, { method: "HEAD", headers: owner.headers })).status, 200);
  });

  s("a watcher who loses read access is ended as a caller without access is answered; others, and admins, go on", async ({ svc }) => {
    const owner = await user(svc, "owner", ["publisher"]);
    const bob = await user(svc, "bob", []);
    const carol = await user(svc, "carol", [], ["acme"]);
    const root = await user(svc, "root", ["admin"]);
    const { e } = await entityWithVersion(owner.rest);
    for (const [path, body] of [["shares", { user_id: "bob" }], ["shares", { user_id: "carol" }]] as const) assert.is((await owner.rest.post(`${v(e)}/${path}`, body)).status, 200);
    assert.is((await owner.rest.put(`${v(e)}/stores/orgs/acme`, undefined)).status, 200);
    const bobWatch = watchGrpc(bob.grpc, e);
    const carolWatch = watchRest(svc.url, e, carol.headers, { backend });
    const rootWatch = watchConnect(svc.url, "connect", e, root.headers);
    try {
      for (const w of [bobWatch, carolWatch, rootWatch]) assert.is(await w.bookmark(), "6");
      assert.is((await owner.rest.delete(`${v(e)}/shares/bob`)).status, 200);
      const bobEnd = await bobWatch.ended();
      assert.equal([bobEnd.code, bobEnd.reason], [grpc.status.NOT_FOUND, "ENTITY_NOT_FOUND"]);
      assert.equal(bobWatch.received.filter((x) => x.kind === "event"), [], "the event that took bob's access is not sent to him");
      // Carol can still read through her organization's store.
      assert.is((await owner.rest.delete(`${v(e)}/shares/carol`)).status, 200);
      // A reader, not a publisher: told that access changed, not whose.
      assert.equal((await carolWatch.events(2)).map(brief), ["7 ACCESS_CHANGED  SHARE_REMOVED:", "8 ACCESS_CHANGED  SHARE_REMOVED:"]);
      assert.is((await owner.rest.delete(`${v(e)}/stores/orgs/acme`)).status, 200);
      const carolEnd = await carolWatch.ended();
      assert.equal([carolEnd.httpStatus, carolEnd.reason], [200, "ENTITY_NOT_FOUND"], "REST: a last {error} line");
      assert.is(carolWatch.received.filter((x) => x.kind === "event").length, 2);
      // Admins keep access: they see all three.
      assert.equal((await rootWatch.events(3)).map((x) => x.access), ["SHARE_REMOVED:bob", "SHARE_REMOVED:carol", "ORG_STORE_REMOVED:acme"]);
      assert.not.ok(rootWatch.done);
    } finally {
      for (const w of [bobWatch, carolWatch, rootWatch]) w.close();
    }
  });

  s("every kind of change wakes this process's watches at once, not at the next poll", async () => {
    // A poll a minute apart: only the commit's own prompt can deliver within seconds.
    const svc = await startService(backend, { env: { WATCH_POLL_INTERVAL_MS: "60000" } });
    const owner = await user(svc, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(owner.rest);
    const w = watchGrpc(owner.grpc, e);
    try {
      assert.is(await w.bookmark(), "3");
      const v2 = (await push({ rest: owner.rest }, e, { base: v1 })).confirm!.body.version.id as string;
      assert.equal((await w.events(1, 3_000)).map(brief), [`4 VERSION_CREATED ${v2}`], "a confirm");
      assert.is((await owner.rest.put(`${v(e)}/active-version`, { versionId: v2 })).status, 200);
      assert.equal((await w.events(1, 3_000)).map(brief), [`5 ACTIVE_VERSION_CHANGED ${v2}`], "an activation");
      assert.is((await owner.rest.delete(`${v(e)}/versions/${v1}`)).status, 200);
      assert.equal((await w.events(1, 3_000)).map(brief), [`6 VERSION_DELETED ${v1}`], "a deletion");
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      assert.equal((await w.events(1, 3_000)).map(brief), ["7 ACCESS_CHANGED  SHARE_ADDED:bob"], "an access change");
    } finally {
      w.close();
      await svc.close();
    }
  });

  s("bounded: TOO_MANY_WATCHES past the caller's and the process's caps (REST 429 with Retry-After); a quiet watch gets bookmarks; shutdown ends watches where they can resume", async () => {
    const svc = await startService(backend, { env: { WATCH_MAX_PER_CALLER: "2", WATCH_MAX_PER_PROCESS: "3", WATCH_KEEPALIVE_MS: "300" } });
    const opened: WatchStream[] = [];
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const other = await user(svc, "other", ["admin"]);
      const { e } = await entityWithVersion(owner.rest);
      const quietSince = Date.now();
      opened.push(watchGrpc(owner.grpc, e), watchRest(svc.url, e, owner.headers, { backend }));
      for (const w of opened) assert.is(await w.bookmark(), "3");
      const third = watchRest(svc.url, e, owner.headers, { backend });
      const thirdEnd = await third.ended();
      assert.equal([thirdEnd.httpStatus, thirdEnd.reason], [429, "TOO_MANY_WATCHES"]);
      assert.match(thirdEnd.message, "You already have 2 watches open");
      opened.push(watchGrpc(other.grpc, e));
      assert.is(await opened[2]!.bookmark(), "3");
      const fourth = watchGrpc(other.grpc, e);
      const fourthEnd = await fourth.ended();
      assert.equal([fourthEnd.code, fourthEnd.reason], [grpc.status.RESOURCE_EXHAUSTED, "TOO_MANY_WATCHES"]);
      assert.match(fourthEnd.message, "This server already serves 3 watches");
      // Ending one frees its place.
      opened.shift()!.close();
      await new Promise((resolve) => setTimeout(resolve, 200));
      opened.push(watchGrpc(owner.grpc, e));
      assert.is(await opened[2]!.bookmark(), "3");
      // Keep-alives: a quiet watch is sent a bookmark each interval (300 ms),
      // not more often. Counted over the watch's whole life, not timed from
      // one to the next: a loaded machine's client reads some late, and then
      // several at once, but cannot receive more than were sent.
      const quiet = opened[0]!;
      for (let i = 0; i < 3; i++) assert.is(await quiet.bookmark(5_000), "3");
      const bookmarks = quiet.received.filter((item) => item.kind === "bookmark").length;
      const most = Math.floor((Date.now() - quietSince) / 300) + 1;
      assert.ok(bookmarks <= most, `${bookmarks} bookmarks in ${Date.now() - quietSince} ms, for an interval of 300 ms (at most ${most})`);
      // An event in between: the bookmarks after it carry its id.
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      const [shared] = await quiet.events(1);
      assert.is(shared!.id, "4");
      assert.is(await quiet.bookmark(1_000), "4");
      // Shutdown: every watch ends UNAVAILABLE SHUTTING_DOWN, naming the last event each passed.
      const closing = svc.close();
      for (const w of opened) {
        const end = await w.ended();
        if (end.httpStatus === undefined) {
          assert.equal([end.code, end.reason, end.metadata["last_event_id"]], [grpc.status.UNAVAILABLE, "SHUTTING_DOWN", "4"]);
        } else {
          assert.equal([end.httpStatus, end.reason], [200, "SHUTTING_DOWN"]);
        }
        assert.match(end.message, "after_event_id=4", JSON.stringify(end));
      }
      await closing;
    } finally {
      for (const w of opened) w.close();
      await svc.close().catch(() => undefined);
    }
  });

  s("a client that stops reading, then resets its stream, frees its watch's place, on every protocol", async () => {
    const svc = await startService(backend, { env: { WATCH_MAX_PER_CALLER: "2" } });
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const { e } = await entityWithVersion(owner.rest);
      // Enough history that a replay outgrows the stream's window and Node's buffer.
      for (let i = 0; i < 150; i++) assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: `u${i}` })).status, 200);
      const envelope = (json: unknown) => {
        const body = Buffer.from(JSON.stringify(json));
        const head = Buffer.alloc(5);
        head.writeUInt32BE(body.length, 1);
        return Buffer.concat([head, body]);
      };
      for (const kind of ["grpc", "grpc-web", "connect", "rest"]) {
        // A 1 KiB stream window, never read: the server's writes soon wait for a WINDOW_UPDATE.
        const session = http2.connect(svc.url, { settings: { initialWindowSize: 1024 } });
        session.on("error", () => {});
        const streams = Array.from({ length: 2 }, () => {
          const req =
            kind === "rest"
              ? session.request({ ":method": "GET", ":path": `${v(e)}/events:watch?after_event_id=0`, ...owner.headers })
              : session.request({
                  ":method": "POST",
                  ":path": "/entityversions.v1.EntityEventsService/WatchEvents",
                  "content-type": `application/${kind}+json`,
                  ...(kind === "connect" ? { "connect-protocol-version": "1" } : { te: "trailers" }),
                  ...owner.headers,
                });
          req.on("error", () => {});
          req.end(kind === "rest" ? undefined : envelope({ entityId: e, afterEventId: "0" }));
          req.pause();
          return req;
        });
        await new Promise((resolve) => setTimeout(resolve, 500));
        assert.is(svc.app.watches.size, 2, `${kind}: both watches open`);
        for (const req of streams) req.close(http2.constants.NGHTTP2_CANCEL);
        const freed = Date.now() + 5_000;
        while (svc.app.watches.size > 0 && Date.now() < freed) await new Promise((resolve) => setTimeout(resolve, 50));
        assert.is(svc.app.watches.size, 0, `${kind}: the watches are closed once their clients reset them`);
        const again = watchGrpc(owner.grpc, e);
        assert.is(await again.bookmark(), "153", `${kind}: the caller may watch again`);
        again.close();
        session.destroy();
      }
    } finally {
      await svc.close();
    }
  });

  s("a REST watch whose client leaves while its token is checked opens no watch, or closes it at once (HTTP/2 reset, HTTP/1.1 connection closed, pipelined or not)", async () => {
    // Tokens checked as the service checks them, but held, as a check
    // waiting on the issuer's key set is, until each client below has left.
    const verifier = new JwtAuthenticator({ ...testAuth, clockSkewSeconds: 0, jwksCooldownSeconds: 30, jwksMaxAgeSeconds: 60, tokenCacheSeconds: 0 }, memoryLogger().logger);
    let held: { count: number; until: Promise<void> } | undefined;
    const slowCheck: Authenticator = {
      authenticate: async (authorization) => {
        if (held !== undefined) {
          held.count++;
          await held.until;
        }
        return verifier.authenticate(authorization);
      },
    };
    const svc = await startService(backend, { authenticator: slowCheck });
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const { e } = await entityWithVersion(owner.rest);
      const open = async () => Number((await (await fetch(`${svc.url}/metrics`)).text()).split("\n").find((l) => l.startsWith("entity_versions_watches_open "))?.split(" ")[1]);
      const { hostname, port } = new URL(svc.url);
      const leave: Record<string, (authorization: string) => Promise<void>> = {
        "HTTP/2, its stream reset": async (authorization) => {
          const session = http2.connect(svc.url);
          session.on("error", () => {});
          await new Promise((resolve) => session.once("connect", resolve));
          const req = session.request({ ":path": `${v(e)}/events:watch`, authorization });
          req.on("error", () => {});
          req.close(http2.constants.NGHTTP2_CANCEL);
          await new Promise((resolve) => setTimeout(resolve, 5));
          session.destroy();
        },
        "HTTP/1.1, its connection closed": async (authorization) => {
          const socket = net.connect(Number(port), hostname);
          socket.on("error", () => {});
          await new Promise((resolve) => socket.once("connect", resolve));
          socket.write(`GET ${v(e)}/events:watch HTTP/1.1\r\nHost: x\r\nAuthorization: ${authorization}\r\n\r\n`);
          socket.destroy();
        },
        // The second one's answer waits behind the first's, never given the connection.
        "HTTP/1.1, pipelined behind another, its connection closed": async (authorization) => {
          const socket = net.connect(Number(port), hostname);
          socket.on("error", () => {});
          await new Promise((resolve) => socket.once("connect", resolve));
          const request = `GET ${v(e)}/events:watch HTTP/1.1\r\nHost: x\r\nAuthorization: ${authorization}\r\n\r\n`;
          const before = held?.count ?? 0;
          socket.write(request + request);
          // Both at their token's check, the second's answer queued behind the first's.
          for (const end = Date.now() + 3_000; (held?.count ?? 0) < before + 2 && Date.now() < end; ) await new Promise((resolve) => setTimeout(resolve, 5));
          socket.destroy();
        },
      };
      const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      for (const [how, watchAndLeave] of Object.entries(leave)) {
        let release!: () => void;
        const batch = (held = { count: 0, until: new Promise<void>((resolve) => (release = resolve)) });
        for (let i = 0; i < 20; i++) await watchAndLeave(bearer(await token({ sub: `leaver-${i}`, roles: ["admin"] })).authorization);
        for (const end = Date.now() + 3_000; batch.count < 20 && Date.now() < end; ) await sleep(20);
        assert.ok(batch.count > 0, `${how}: the calls reached their token's check`);
        // Every client is gone by now; their calls go on.
        await sleep(200);
        held = undefined;
        release();
        // Long enough for a watch to open; then each left open would hold its caller's places, and the server's, until its token's exp.
        await sleep(1_000);
        for (const end = Date.now() + 5_000; (await open()) > 0 && Date.now() < end; ) await sleep(50);
        assert.is(await open(), 0, `${how}: no watch is left open for a client that has left`);
      }
      // The caller may still watch.
      const again = watchRest(svc.url, e, owner.headers, { backend });
      assert.is(await again.bookmark(), "3");
      again.close();
    } finally {
      await svc.close();
    }
  });

  s("a watch ends when its token expires: TOKEN_EXPIRED naming the last event sent, from which a new token resumes with nothing missed", async () => {
    // No clock skew: the token stops being accepted at its exp.
    const svc = await startService(backend, { env: { AUTH_CLOCK_SKEW_SECONDS: "0" } });
    const opened: WatchStream[] = [];
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const { e } = await entityWithVersion(owner.rest);
      const short = bearer(await token({ sub: "owner", roles: ["publisher"], expiresIn: 3 }));
      const expiresAt = (Math.floor(Date.now() / 1000) + 3) * 1000;
      opened.push(watchGrpc(svc.grpcAs(short), e), watchRest(svc.url, e, short, { backend }), watchConnect(svc.url, "connect", e, short));
      for (const w of opened) assert.is(await w.bookmark(), "3");
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      for (const w of opened) assert.is((await w.events(1))[0]!.id, "4");
      for (const w of opened) {
        const end = await w.ended(6_000);
        assert.ok(Date.now() >= expiresAt - 50, "not before the token's exp");
        if (end.httpStatus === undefined) {
          assert.equal([end.code, end.reason, end.metadata["last_event_id"]], [grpc.status.UNAUTHENTICATED, "TOKEN_EXPIRED", "4"], JSON.stringify(end));
        } else {
          assert.equal([end.httpStatus, end.reason], [200, "TOKEN_EXPIRED"], "REST: a last {error} line");
        }
        assert.match(end.message, "after_event_id=4", JSON.stringify(end));
      }
      // Whatever happened meanwhile reaches the resumed watch, once.
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "carol" })).status, 200);
      const resumed = watchGrpc(owner.grpc, e, { afterEventId: "4" });
      opened.push(resumed);
      assert.equal((await resumed.events(1)).map(brief), ["5 ACCESS_CHANGED  SHARE_ADDED:carol"]);
      assert.is(await resumed.bookmark(), "5");
      // An expired token opens no new watch.
      const late = await watchGrpc(svc.grpcAs(short), e).ended();
      assert.equal([late.code, late.reason], [grpc.status.UNAUTHENTICATED, "TOKEN_EXPIRED"]);
    } finally {
      for (const w of opened) w.close();
      await svc.close();
    }
  });

  s("a watch whose client stopped reading (its HTTP/2 window left at 0) gives its place back once it is ended, by its token's expiry or a shutdown, though its client never reads again", async () => {
    const svc = await startService(backend, { env: { AUTH_CLOCK_SKEW_SECONDS: "0", SHUTDOWN_TIMEOUT_MS: "10000" } });
    const session = http2.connect(svc.url, { settings: { initialWindowSize: 0 } });
    session.on("error", () => {});
    let closed = false;
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const { e } = await entityWithVersion(owner.rest);
      // Events enough to fill the stream's buffers: the replay is paused at a write.
      for (let i = 0; i < 60; i++) {
        assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: `reader-${i}` })).status, 200);
        assert.is((await owner.rest.delete(`${v(e)}/shares/reader-${i}`)).status, 200);
      }
      const watchFor = (authorization: string) => {
        const req = session.request({ ":path": `${v(e)}/events:watch?after_event_id=0`, authorization });
        req.on("error", () => {});
        return req;
      };
      watchFor(bearer(await token({ sub: "owner", roles: ["publisher"], expiresIn: 2 })).authorization);
      const until = async (what: string, check: () => boolean, ms: number) => {
        for (const end = Date.now() + ms; !check(); await new Promise((resolve) => setTimeout(resolve, 50))) {
          if (Date.now() > end) assert.unreachable(`${what} within ${ms} ms`);
        }
      };
      await until("the watch to open", () => svc.app.watches.size === 1, 3_000);
      // exp in 2 s, then 2 s away from next() at most: the place is free well before the connection ends.
      await until("the expired, unread watch to give its place back", () => svc.app.watches.size === 0, 8_000);

      watchFor(owner.rest.defaultHeaders["authorization"]!);
      await until("the second watch to open", () => svc.app.watches.size === 1, 3_000);
      closed = true;
      const stopping = svc.close();
      // Ended by the shutdown, and away from next(): not waited for (it was,
      // for SHUTDOWN_TIMEOUT_MS, before the server stopped taking calls).
      await until("the shutdown to give the unread watch's place back", () => svc.app.watches.size === 0, 6_000);
      await stopping;
    } finally {
      session.destroy();
      if (!closed) await svc.close();
    }
  });

  s("EVENT_RETENTION_DAYS: the sweeper deletes older events as a prefix of each entity's log; a watch from inside the deleted part is refused with EVENTS_EXPIRED", async () => {
    const svc = await startService(backend, { env: { EVENT_RETENTION_DAYS: "1" } });
    const knex = connectTestDatabase(backend, svc.db);
    const opened: WatchStream[] = [];
    try {
      const owner = await user(svc, "owner", ["publisher"]);
      const { e } = await entityWithVersion(owner.rest);
      const { e: recent } = await entityWithVersion(owner.rest);
      assert.is((await owner.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      // Events 1 and 2 of e happened two days ago; e's event 3, 4 and everything of the other entity are new.
      await knex("entity_events").where("entity_id", e).andWhere("seq", "<=", 2).update({ occurred_at: new Date(Date.now() - 2 * 24 * 3600_000) });
      assert.is((await svc.app.sweeper.runOnce()).prunedEvents, 2);
      assert.is((await svc.app.sweeper.runOnce()).prunedEvents, 0, "nothing left to delete");
      const ids = async (entity: string) => (await owner.rest.get(`${v(entity)}/events`)).body.events.map((x: { id: string }) => x.id);
      assert.equal(await ids(e), ["4", "3"]);
      assert.equal(await ids(recent), ["3", "2", "1"]);

      // Resuming inside the deleted part would miss events: refused, saying what to do.
      const restEnd = await watchRest(svc.url, e, owner.headers, { afterEventId: "1", backend }).ended();
      assert.equal([restEnd.httpStatus, restEnd.reason], [410, "EVENTS_EXPIRED"]);
      assert.match(restEnd.message, "watch without after_event_id");
      const grpcEnd = await watchGrpc(owner.grpc, e, { afterEventId: "0" }).ended();
      assert.equal([grpcEnd.code, grpcEnd.reason, grpcEnd.metadata["pruned_through"]], [grpc.status.OUT_OF_RANGE, "EVENTS_EXPIRED", "2"]);
      // From the last deleted event on, nothing is missing.
      opened.push(watchGrpc(owner.grpc, e, { afterEventId: "2" }), watchGrpc(owner.grpc, e));
      assert.equal((await opened[0]!.events(2)).map((x) => `${x.id} ${x.type}`), ["3 ACTIVE_VERSION_CHANGED", "4 ACCESS_CHANGED"]);
      for (const w of opened) assert.is(await w.bookmark(), "4");
    } finally {
      for (const w of opened) w.close();
      await knex.destroy();
      await svc.close();
    }
  });

  return s;
}

/**
 * Two service processes on one MySQL database: a watch on either sees the
 * other's changes within 2 s, activation races between them have one
 * winner, and a process that stops ends its watches where they can resume
 * on the other.
 */
export function watchReplicasSuite() {
  const s = suite<{ a: TestService; b: Awaited<ReturnType<typeof spawnService>> }>("mysql: watch across replicas: two processes, one database");

  s.before(async (ctx) => {
    const db = await createTestDatabase("mysql");
    ctx.a = await startService("mysql", { db });
    ctx.b = await spawnService({ ...(await serviceEnv(db)), PORT: "0" }, db);
  });
  s.after(async (ctx) => {
    await ctx.b?.close();
    await ctx.a?.close();
    await ctx.a?.db.drop();
  });

  s("a watch on one process sees the other's push and activation, in order, within 2 s", async ({ a, b }) => {
    const ownerA = await user(a, "owner", ["publisher"]);
    const ownerB = await user(b, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(ownerA.rest);
    const onA = watchGrpc(ownerA.grpc, e);
    const onB = watchRest(b.url, e, ownerB.headers, { backend: "mysql" });
    try {
      assert.is(await onA.bookmark(), "3");
      assert.is(await onB.bookmark(), "3");
      let answered = Date.now();
      const v2 = (await push({ rest: ownerB.rest }, e, { base: v1 })).confirm!.body.version.id as string;
      answered = Date.now();
      const [created] = await onA.events(1, 2_000);
      const createdAfter = Date.now() - answered;
      answered = Date.now();
      assert.is((await ownerB.rest.put(`${v(e)}/active-version`, { versionId: v2, expected_active_version_id: v1 })).status, 200);
      answered = Date.now();
      const [activated] = await onA.events(1, 2_000);
      const activatedAfter = Date.now() - answered;
      assert.equal([created, activated].map((x) => brief(x!)), [`4 VERSION_CREATED ${v2}`, `5 ACTIVE_VERSION_CHANGED ${v2}`]);
      assert.ok(createdAfter < 2_000 && activatedAfter < 2_000, `${createdAfter} ms, ${activatedAfter} ms`);
      // And the other way round.
      assert.is((await ownerA.rest.post(`${v(e)}/shares`, { user_id: "bob" })).status, 200);
      assert.equal((await onB.events(3, 2_000)).map((x) => x.id), ["4", "5", "6"]);
    } finally {
      onA.close();
      onB.close();
    }
  });

  s("activations racing on two processes, each expecting the same version: exactly one wins", async ({ a, b }) => {
    const ownerA = await user(a, "owner", ["publisher"]);
    const ownerB = await user(b, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(ownerA.rest);
    const targets: string[] = [];
    let base = v1;
    for (let i = 0; i < 8; i++) targets.push((base = (await push({ rest: ownerA.rest }, e, { base })).confirm!.body.version.id));
    const results = await Promise.all(targets.map((t, i) => (i % 2 === 0 ? ownerA : ownerB).rest.put(`${v(e)}/active-version`, { versionId: t, expected_active_version_id: v1 })));
    const winners = results.filter((r) => r.status === 200);
    assert.is(winners.length, 1, JSON.stringify(results.map((r) => r.body.code ?? r.status)));
    for (const r of results.filter((x) => x.status !== 200)) assert.equal([r.status, r.body.code, r.body.current_active_version.id], [409, "ACTIVE_VERSION_CHANGED", winners[0]!.body.id]);
  });

  s("SIGTERM ends a process's watches with SHUTTING_DOWN naming the last event; resumed on the other process, nothing is missed or repeated", async ({ a }) => {
    const owner = await user(a, "owner", ["publisher"]);
    const { e, v1 } = await entityWithVersion(owner.rest);
    const c = await spawnService({ ...a.env, PORT: "0" }, a.db);
    const onC = watchGrpc(c.grpcAs(owner.headers), e, { afterEventId: "1" });
    const onCRest = watchRest(c.url, e, owner.headers, { backend: "mysql" });
    try {
      assert.equal((await onC.events(2)).map((x) => x.id), ["2", "3"]);
      assert.is(await onC.bookmark(), "3");
      assert.is(await onCRest.bookmark(), "3");
      const exited = new Promise<number | null>((resolve) => c.child.once("exit", resolve));
      const stopping = Date.now();
      c.child.kill("SIGTERM");
      const [end, restEnd] = [await onC.ended(), await onCRest.ended()];
      assert.equal([end.code, end.reason, end.metadata["last_event_id"]], [grpc.status.UNAVAILABLE, "SHUTTING_DOWN", "3"]);
      assert.equal([restEnd.httpStatus, restEnd.reason], [200, "SHUTTING_DOWN"]);
      assert.match(restEnd.message, "after_event_id=3");
      assert.is(await exited, 0);
      assert.ok(Date.now() - stopping < 5_000, "watches do not hold the shutdown to its timeout");
      // Changes made meanwhile are all there when the client resumes elsewhere.
      const v2 = (await push({ rest: owner.rest }, e, { base: v1 })).confirm!.body.version.id as string;
      const resumed = watchGrpc(owner.grpc, e, { afterEventId: end.metadata["last_event_id"]! });
      try {
        assert.equal((await resumed.events(1)).map(brief), [`4 VERSION_CREATED ${v2}`]);
        assert.is(await resumed.bookmark(), "4");
      } finally {
        resumed.close();
      }
    } finally {
      onC.close();
      onCRest.close();
      await c.close();
    }
  });

  return s;
}

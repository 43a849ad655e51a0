import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { brotliCompressSync, constants as zlibConstants, gunzipSync, gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import * as assert from "uvu/assert";
import { type WatchEventsResponse, WatchEventsRequestSchema, WatchEventsResponseSchema } from "../../gen/entityversions/v1/entity_events_pb.js";
import { GetVersionRequestSchema, GetVersionResponseSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import type { Backend } from "../support/env.js";
import { memoryLogger, newEntityId, push, startService } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { answerOf } from "../support/raw-h2.js";

function h2Request(url: string, path: string, headers: Record<string, string>, method = "GET"): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    session.on("error", reject);
    const req = session.request({ ":path": path, ":method": method, ...headers });
    let body = "";
    let status = 0;
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      session.close();
      resolve({ status, body });
    });
    req.end();
  });
}

/** The same port speaks REST, Connect, gRPC-Web and gRPC; errors keep one JSON shape. */
/** The request log lines the service wrote for `path`, from a memory logger's text. */
function requestLines(logged: string, path: string): Array<{ msg: string; path?: string; status?: number; code?: string; reason?: string }> {
  return logged
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as { msg: string; path?: string; status?: number; code?: string; reason?: string })
    .filter((l) => l.msg === "request" && l.path === path);
}

export function protocolsSuite(backend: Backend) {
  const s = serviceSuite("protocols: one port, Connect, gRPC-Web, REST errors", backend);

  s("REST answers over HTTP/1.1 and over HTTP/2 with prior knowledge on the same port", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const h1 = await svc.rest.get(`/api/entities/${e}/versions/${v.id}`);
    assert.is(h1.status, 200);
    const h2 = await h2Request(svc.url, `/api/entities/${e}/versions/${v.id}`, svc.rest.defaultHeaders);
    assert.is(h2.status, 200);
    assert.equal(JSON.parse(h2.body), h1.body);
  });

  s("Connect JSON and Connect GET reach the same service", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const post = await svc.rest.post("/entityversions.v1.EntityVersionsService/GetVersion", { entityId: e, versionId: v.id });
    assert.is(post.status, 200);
    assert.is(post.body.version.id, v.id);
    assert.is(post.body.version.fileSizeBytes, String(v.file_size_bytes));
    const message = encodeURIComponent(JSON.stringify({ entityId: e, versionId: "nope" }));
    const get = await svc.rest.get(`/entityversions.v1.EntityVersionsService/GetVersion?connect=v1&encoding=json&message=${message}`);
    assert.is(get.status, 404);
    assert.is(get.body.code, "not_found");
    assert.is(get.body.details[0].type, "google.rpc.ErrorInfo");
    assert.is(get.headers.get("vary"), "Accept-Encoding", "a cacheable GET says its answer depends on Accept-Encoding");
    const base64 = Buffer.from(JSON.stringify({ entityId: e, versionId: v.id })).toString("base64url");
    assert.is((await svc.rest.get(`/entityversions.v1.EntityVersionsService/GetVersion?connect=v1&encoding=json&base64=1&message=${base64}`)).body.version.id, v.id);
    // A message that is not base64 is the client's error, not the service's.
    const notBase64 = await svc.rest.get(`/entityversions.v1.EntityVersionsService/GetVersion?connect=v1&encoding=json&base64=1&message=!!!!`);
    assert.equal([notBase64.status, notBase64.body.code], [400, "invalid_argument"], JSON.stringify(notBase64.body));
    assert.match(notBase64.body.message, "is not base64");
    // A 401 names its scheme (RFC 9110 15.5.2), as REST's does.
    const anonymous = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    assert.equal([anonymous.status, anonymous.headers.get("www-authenticate")], [401, 'Bearer realm="entity-versions"']);
    const badToken = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer not.a.jwt" }, body: "{}" });
    assert.is(badToken.status, 401);
    assert.match(badToken.headers.get("www-authenticate") ?? "", 'Bearer realm="entity-versions", error="invalid_token", error_description="');
    // A misspelt field is refused, as the protobuf JSON mapping and REST do, not dropped.
    const misspelt = await svc.rest.post("/entityversions.v1.EntityVersionsService/GetVersion", { entityId: e, versionId: v.id, version_idd: "x" });
    assert.equal([misspelt.status, misspelt.body.code], [400, "invalid_argument"]);
    assert.match(misspelt.body.message, 'key "version_idd" is unknown');
    // A codec Connect does not take: 415, and what to send instead, in Connect's error JSON.
    const rpcPath = `${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`;
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    for (const [init, shown] of [
      [{ method: "POST", headers: { ...auth, "content-type": "text/plain" }, body: "{}" }, "text/plain"],
      [{ method: "POST", headers: auth, body: "{}" }, "text/plain;charset=UTF-8"],
      [{ method: "GET", headers: auth }, "encoding=(none)"],
    ] as const) {
      const refused = await fetch(init.method === "GET" ? `${rpcPath}?connect=v1&message=%7B%7D` : rpcPath, init);
      assert.is(refused.status, 415, shown);
      const body = (await refused.json()) as { code: string; message: string; details: { type: string }[] };
      assert.is(body.code, "invalid_argument", shown);
      assert.match(body.message, `Content-Type ${shown} is not one this RPC takes: call a unary RPC with application/json or application/proto (Connect`, shown);
      assert.is(body.details[0]?.type, "google.rpc.ErrorInfo");
    }
    // A raw byte in an HTTP/2 URL is that byte, as REST reads it (HTTP/1.1's parser refuses one): a
    // message whose bytes as sent are not UTF-8 is refused, as any JSON message is.
    const rawGet = (bytes: number[]) =>
      `/entityversions.v1.EntityVersionsService/GetVersion?connect=v1&encoding=json&message=${encodeURIComponent(`{"entityId":"${e}","versionId":"`)}${Buffer.from(bytes).toString("latin1")}${encodeURIComponent('"}')}`;
    const rawNotUtf8 = await h2Request(svc.url, rawGet([0xff]), auth);
    assert.is(rawNotUtf8.status, 400, rawNotUtf8.body);
    assert.equal([JSON.parse(rawNotUtf8.body).code, JSON.parse(rawNotUtf8.body).message], ["invalid_argument", "The request could not be read: a request message is not UTF-8: send JSON encoded in UTF-8, as RFC 8259 asks"]);
    // Bytes that are UTF-8 pass, each read as its Latin-1 character, as REST reads them.
    const rawUtf8 = await h2Request(svc.url, rawGet([0xc3, 0xa9]), auth);
    assert.equal([rawUtf8.status, JSON.parse(rawUtf8.body).code], [400, "invalid_argument"], rawUtf8.body);
    assert.match(JSON.parse(rawUtf8.body).message, 'Invalid version_id: "Ã©" is not a version id');
    // A gzipped body is read, whatever case its coding's name is in (RFC 9110, 8.4.1).
    for (const coding of ["gzip", "GZip"]) {
      const zipped = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
        method: "POST",
        headers: { "content-type": "application/json", "content-encoding": coding, authorization: svc.rest.defaultHeaders["authorization"]! },
        body: gzipSync(JSON.stringify({ entityId: e, versionId: v.id })),
      });
      assert.equal([zipped.status, ((await zipped.json()) as { version: { id: string } }).version.id], [200, v.id], coding);
    }
  });

  s("an answer asked for in brotli is compressed at quality 4, the cost of gzip, not Node's default 11", async ({ svc }) => {
    const e = newEntityId();
    let base: string | undefined;
    for (let i = 0; i < 4; i++) base = (await push(svc, e, base === undefined ? {} : { base })).confirm!.body.version.id as string;
    const listed = (acceptEncoding: string) =>
      new Promise<{ encoding: string | undefined; body: Buffer }>((resolve, reject) => {
        const r = http.request(
          `${svc.url}/entityversions.v1.EntityVersionsService/ListVersions`,
          { method: "POST", headers: { "content-type": "application/json", "accept-encoding": acceptEncoding, ...svc.rest.defaultHeaders } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => resolve({ encoding: res.headers["content-encoding"], body: Buffer.concat(chunks) }));
          },
        );
        r.on("error", reject);
        r.end(JSON.stringify({ entityId: e }));
      });
    const plain = await listed("identity");
    assert.ok(plain.body.length > 1024, `an answer past Connect's compressMinBytes (${plain.body.length} bytes)`);
    const br = await listed("br");
    assert.is(br.encoding, "br");
    assert.ok(br.body.equals(brotliCompressSync(plain.body, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 4 } })), "quality 4's bytes");
  });

  s("Connect binary (application/proto) reaches the same service", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const res = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
      method: "POST",
      headers: { "content-type": "application/proto", "connect-protocol-version": "1", ...svc.rest.defaultHeaders },
      body: toBinary(GetVersionRequestSchema, create(GetVersionRequestSchema, { entityId: e, versionId: v.id })),
    });
    assert.is(res.status, 200);
    assert.is(res.headers.get("content-type"), "application/proto");
    assert.is(fromBinary(GetVersionResponseSchema, new Uint8Array(await res.arrayBuffer())).version?.id, v.id);
  });

  s("gRPC-Web (binary) reaches the same service", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const payload = toBinary(GetVersionRequestSchema, create(GetVersionRequestSchema, { entityId: e, versionId: v.id }));
    const frame = Buffer.alloc(5 + payload.length);
    frame.writeUInt32BE(payload.length, 1);
    Buffer.from(payload).copy(frame, 5);
    const res = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", ...svc.rest.defaultHeaders },
      body: frame,
    });
    assert.is(res.status, 200);
    const body = Buffer.from(await res.arrayBuffer());
    assert.is(body[0], 0);
    const len = body.readUInt32BE(1);
    const msg = fromBinary(GetVersionResponseSchema, body.subarray(5, 5 + len));
    assert.is(msg.version?.id, v.id);
    assert.is(body[5 + len], 0x80);
    assert.match(body.subarray(10 + len).toString(), /^grpc-status: ?0\r\n/m);
  });

  s("gRPC-Web's text form (base64, Google's grpc-web client's default): a unary call sent as padded runs, and a watch whose events come as they happen", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e)).confirm!.body.version;
    const envelope = (payload: Uint8Array) => {
      const frame = Buffer.alloc(5 + payload.length);
      frame.writeUInt32BE(payload.length, 1);
      Buffer.from(payload).copy(frame, 5);
      return frame;
    };
    // Each group of four characters on its own, as Google's client reads them: padding may come anywhere between groups.
    const fromText = (text: string) => Buffer.concat(Array.from({ length: Math.ceil(text.length / 4) }, (_, i) => Buffer.from(text.slice(4 * i, 4 * i + 4), "base64")));
    /** The frames of a gRPC-Web body: messages, then the trailer frame's text. */
    const framesOf = (body: Buffer) => {
      const messages: Buffer[] = [];
      let trailer: string | undefined;
      for (let at = 0; at + 5 <= body.length; ) {
        const length = body.readUInt32BE(at + 1);
        const payload = body.subarray(at + 5, at + 5 + length);
        if ((body[at]! & 0x80) !== 0) trailer = payload.toString();
        else messages.push(payload);
        at += 5 + length;
      }
      return { messages, trailer };
    };
    const request = envelope(toBinary(GetVersionRequestSchema, create(GetVersionRequestSchema, { entityId: e, versionId: v.id })));
    // Two runs, each padded: the first 7 bytes, then the rest.
    const sent = request.subarray(0, 7).toString("base64") + request.subarray(7).toString("base64");
    assert.match(sent.slice(0, -2), /=[A-Za-z0-9+/]/, "padding inside the body");
    const res = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web-text", accept: "application/grpc-web-text", "x-grpc-web": "1", ...svc.rest.defaultHeaders },
      body: sent,
    });
    assert.is(res.status, 200);
    assert.is(res.headers.get("content-type"), "application/grpc-web-text+proto");
    const text = await res.text();
    assert.match(text, /^[A-Za-z0-9+/=]+$/, "the answer is base64");
    const { messages, trailer } = framesOf(fromText(text));
    assert.is(messages.length, 1);
    assert.is(fromBinary(GetVersionResponseSchema, messages[0]!).version?.id, v.id);
    assert.match(trailer ?? "", /^grpc-status: ?0\r\n/m);

    const broken = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web-text+proto", "x-grpc-web": "1", ...svc.rest.defaultHeaders },
      body: `${sent}*`,
    });
    const brokenFrames = framesOf(fromText(await broken.text()));
    const status = broken.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(brokenFrames.trailer ?? "")?.[1];
    assert.is(status, "3", "a body that is not base64 is INVALID_ARGUMENT");

    // A server stream: the bookmark at once, then the event of a push made while it is open.
    const controller = new AbortController();
    try {
      const watch = await fetch(`${svc.url}/entityversions.v1.EntityEventsService/WatchEvents`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web-text", "x-grpc-web": "1", ...svc.rest.defaultHeaders },
        body: envelope(toBinary(WatchEventsRequestSchema, create(WatchEventsRequestSchema, { entityId: e }))).toString("base64"),
        signal: controller.signal,
      });
      assert.is(watch.headers.get("content-type"), "application/grpc-web-text+proto");
      const reader = watch.body!.getReader();
      let received = "";
      const next = async (done: (items: WatchEventsResponse[]) => boolean) => {
        for (;;) {
          const whole = received.slice(0, received.length - (received.length % 4));
          const items = framesOf(fromText(whole)).messages.map((m) => fromBinary(WatchEventsResponseSchema, m));
          if (done(items)) return items;
          const chunk = await reader.read();
          assert.not.ok(chunk.done, "the watch ended early");
          received += new TextDecoder().decode(chunk.value);
        }
      };
      await next((items) => items.some((i) => i.kind.case === "bookmark"));
      const v2 = (await push(svc, e, { base: v.id })).confirm!.body.version;
      const items = await next((all) => all.some((i) => i.kind.case === "event" && i.kind.value.versionId === v2.id));
      assert.ok(items.length >= 2);
    } finally {
      controller.abort();
    }
  });

  s("gRPC-Web's text form: a message up to MAX_REQUEST_BYTES is served where its connection's budget is that too, its base64 not charged a third more", async () => {
    const limit = 64 * 1024;
    const svc = await startService(backend, { env: { MAX_REQUEST_BYTES: String(limit), MAX_CONNECTION_BUFFERED_BYTES: String(limit) } });
    try {
      // GetActiveVersion of an entity nobody has, padded by an unknown field to just under the limit.
      const head = Buffer.from("\x0a\x07missing", "latin1");
      const padding = limit - 100;
      const message = Buffer.concat([head, Buffer.from([0x9a, 0x06, (padding & 127) | 128, ((padding >> 7) & 127) | 128, padding >> 14]), Buffer.alloc(padding)]);
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      for (const [type, body] of [
        ["application/grpc-web+proto", frame],
        ["application/grpc-web-text", frame.toString("base64")],
      ] as const) {
        const res = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetActiveVersion`, { method: "POST", headers: { "content-type": type, "x-grpc-web": "1", ...svc.rest.defaultHeaders }, body });
        const raw = await res.text();
        const answer = type.endsWith("text") ? Buffer.from(raw, "base64").toString("latin1") : raw;
        assert.match(answer, /grpc-status: ?5\r\n/, `${type}: served (NOT_FOUND), not refused: ${answer.replace(/grpc-status-details-bin: .*/, "")}`);
      }
    } finally {
      await svc.close();
    }
  });

  s("a gRPC-Web call Connect refuses before any interceptor is logged with the status its trailer frame carries, not as unknown: a truncated message in binary and text, and a trailer frame that came compressed", async () => {
    const { logger, text } = memoryLogger("info");
    const svc = await startService(backend, { logger });
    try {
      // An envelope that promises 100 bytes and brings 3.
      const truncated = Buffer.from([0, 0, 0, 0, 100, 1, 2, 3]);
      // A JSON key no field has, long enough that Connect's refusal quoting it is compressed (1 KiB or more, gzip asked for).
      const json = Buffer.from(JSON.stringify({ ["k".repeat(3000)]: 1 }));
      const longKey = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), json]);
      longKey.writeUInt32BE(json.length, 1);
      const names = ["ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated"];
      const cases: Array<{ label: string; method: string; headers: Record<string, string>; body: string | Buffer; trailer: (raw: Buffer) => string }> = [
        { label: "binary", method: "GetVersion", headers: { "content-type": "application/grpc-web+proto" }, body: truncated, trailer: (raw) => raw.toString("latin1") },
        { label: "text", method: "GetActiveVersion", headers: { "content-type": "application/grpc-web-text" }, body: truncated.toString("base64"), trailer: (raw) => Buffer.from(raw.toString("latin1"), "base64").toString("latin1") },
        {
          label: "compressed trailer",
          method: "ListVersions",
          headers: { "content-type": "application/grpc-web+json", "grpc-accept-encoding": "gzip" },
          body: longKey,
          trailer: (raw) => {
            assert.is(raw[0], 0x81, "the trailer frame came compressed");
            return gunzipSync(raw.subarray(5)).toString("latin1");
          },
        },
      ];
      for (const { label, method, headers, body, trailer } of cases) {
        const path = `/entityversions.v1.EntityVersionsService/${method}`;
        const res = await fetch(`${svc.url}${path}`, { method: "POST", headers: { "x-grpc-web": "1", ...headers, ...svc.rest.defaultHeaders }, body });
        const answer = trailer(Buffer.from(await res.arrayBuffer()));
        const status = res.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(answer)?.[1];
        assert.ok(status !== undefined && status !== "0", `${label}: ${answer}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
        const lines = requestLines(text(), path);
        assert.equal(lines.map((l) => l.code), [names[Number(status)]], `${label}: ${JSON.stringify(lines)}`);
      }
    } finally {
      await svc.close();
    }
  });

  s("gRPC and gRPC-Web JSON holding a lone surrogate get a status, not a 500: in the request's key, a value, and a value an error quotes", async ({ svc }) => {
    const e = newEntityId();
    const envelope = (json: string) => {
      const payload = Buffer.from(json);
      const frame = Buffer.alloc(5 + payload.length);
      frame.writeUInt32BE(payload.length, 1);
      payload.copy(frame, 5);
      return frame;
    };
    const bodies: Array<[string, string, number]> = [
      ["GetActiveVersion", `{"entityId":"${e}","\\ud83d":1}`, 3],
      ["ListVersions", `{"entityId":"${e}","pageSize":"\\ud83d"}`, 3],
      ["GetActiveVersion", `{"entityId":"x\\ud83d"}`, 3],
    ];
    for (const [method, json, code] of bodies) {
      const path = `/entityversions.v1.EntityVersionsService/${method}`;
      const web = await fetch(`${svc.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+json", "x-grpc-web": "1", ...svc.rest.defaultHeaders },
        body: envelope(json),
      });
      const webBody = Buffer.from(await web.arrayBuffer()).toString("latin1");
      assert.is(web.status, 200, `gRPC-Web ${json}: ${webBody}`);
      assert.is(web.headers.get("grpc-status") ?? /grpc-status: ?(\d+)/.exec(webBody)?.[1], String(code), `gRPC-Web ${json}: ${webBody}`);
      // In the request's codec, as clients hold it to (connect-go refuses another: INTERNAL "invalid content-type").
      assert.is(web.headers.get("content-type"), "application/grpc-web+json", `gRPC-Web ${json}`);
      let contentType: string | undefined;
      const h2 = await new Promise<{ status: string | undefined; message: string }>((resolve, reject) => {
        const session = http2.connect(svc.url);
        session.on("error", reject);
        const req = session.request({ ":path": path, ":method": "POST", "content-type": "application/grpc+json", te: "trailers", ...svc.rest.defaultHeaders });
        let status: string | undefined;
        let message = "";
        const read = (h: http2.IncomingHttpHeaders) => {
          if (h[":status"] !== undefined) contentType = h["content-type"];
          status ??= h["grpc-status"] as string | undefined;
          message ||= String(h["grpc-message"] ?? "");
        };
        req.on("response", read);
        req.on("trailers", read);
        req.on("data", () => undefined);
        req.on("end", () => {
          session.close();
          resolve({ status, message });
        });
        req.end(envelope(json));
      });
      assert.is(h2.status, String(code), `gRPC ${json}: ${h2.message}`);
      // In the request's codec, as clients hold it to (connect-go refuses another: INTERNAL "invalid content-type").
      assert.is(contentType, "application/grpc+json", `gRPC ${json}`);
      assert.ok(decodeURIComponent(h2.message).length > 0, "a readable message");
    }
  });

  s("malformed JSON, wrong types, wrong content types, big bodies and unknown routes get the JSON error shape", async ({ svc }) => {
    const e = newEntityId();
    const path = `/api/entities/${e}/versions/upload-url`;
    const cases: Array<[string, string, string | undefined, Record<string, string>, number, string]> = [
      ["POST", path, "{not json", { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, "[1,2]", { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, '"text"', { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      // null is a body, one that is not an object, as much as 1 is: no body is nothing at all.
      ["POST", path, "null", { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, " null\n", { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, "1", { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, '{"version": 5}', { "content-type": "application/json" }, 400, "INVALID_ARGUMENT"],
      ["POST", path, '{"__proto__": {"x": 1}}', { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, '{"version": "2024.01.01-000000", "version": "2024.01.02-000000"}', { "content-type": "application/json" }, 400, "MALFORMED_REQUEST"],
      ["POST", path, "version=1", { "content-type": "application/x-www-form-urlencoded" }, 415, "UNSUPPORTED_MEDIA_TYPE"],
      ["POST", path, "hello", { "content-type": "text/plain" }, 415, "UNSUPPORTED_MEDIA_TYPE"],
      ["POST", path, "\x1f\x8b compressed", { "content-type": "application/json", "content-encoding": "gzip" }, 415, "UNSUPPORTED_CONTENT_ENCODING"],
      ["POST", path, "{}", { "content-type": "application/json", "content-encoding": "identity" }, 400, "INVALID_ARGUMENT"],
      ["POST", path, JSON.stringify({ version: "x".repeat(2 * 1024 * 1024) }), { "content-type": "application/json" }, 413, "REQUEST_TOO_LARGE"],
      ["GET", "/api/nothing-here", undefined, {}, 404, "ROUTE_NOT_FOUND"],
      ["PATCH", `/api/entities/${e}/active-version`, "{}", { "content-type": "application/json" }, 405, "METHOD_NOT_ALLOWED"],
      ["POST", `/api/entities/${e}/versions/some-id/nothing`, "{}", { "content-type": "application/json" }, 404, "ROUTE_NOT_FOUND"],
      ["GET", `/api/entities/${"%ZZ"}/versions`, undefined, {}, 400, "MALFORMED_REQUEST"],
      ["GET", `/api/entities/${"x".repeat(600)}/versions`, undefined, {}, 400, "INVALID_ARGUMENT"],
    ];
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    for (const [method, url, body, headers, status, code] of cases) {
      const res = await fetch(`${svc.url}${url}`, { method, headers: { ...auth, ...headers }, ...(body === undefined ? {} : { body }) });
      const text = await res.text();
      assert.is(res.status, status, `${method} ${url.slice(0, 60)}: ${text.slice(0, 200)}`);
      assert.ok(res.headers.get("content-type")?.startsWith("application/json"), url);
      const json = JSON.parse(text);
      assert.equal(Object.keys(json).sort(), ["code", "error"], text);
      assert.is(json.code, code, text);
      assert.type(json.error, "string");
    }
    // A whole number out of its type's range says so, and the range; one JSON would round says to send a string.
    const confirm = `/api/entities/${e}/versions/confirm`;
    const outOfRange = await svc.rest.post(confirm, { storage_path: "x", version: "2024.01.01-000000", source_hash: "ab", file_size_bytes: "9223372036854775808" });
    assert.match(outOfRange.body.error, "Invalid file_size_bytes: 9223372036854775808 is out of range: expected a whole number from -9223372036854775808 to 9223372036854775807 (int64)");
    // Millions of digits are refused from their length, before any are read, and not quoted back whole.
    const overlong = await svc.rest.post(confirm, { storage_path: "x", version: "2024.01.01-000000", source_hash: "ab", file_size_bytes: "9".repeat(1_000_000) });
    assert.equal([overlong.status, overlong.body.code], [400, "INVALID_ARGUMENT"]);
    assert.match(overlong.body.error, /^Invalid file_size_bytes: 9{64}… is out of range: expected a whole number from -9223372036854775808 to 9223372036854775807 \(int64\)/);
    const overlongQuery = await svc.rest.get(`/api/entities/${e}/versions?page_size=${"9".repeat(4000)}`);
    assert.equal([overlongQuery.status, overlongQuery.body.code], [400, "INVALID_ARGUMENT"]);
    assert.ok(overlongQuery.body.error.length < 300, overlongQuery.body.error.slice(0, 400));
    const rounded = await svc.rest.post(confirm, '{"file_size_bytes": 9223372036854775807}');
    assert.match(rounded.body.error, 'the number 9223372036854775807 is an integer beyond 2^53');
    // A field under both its names: said so, not protobuf-es's "set multiple times".
    const twice = await svc.rest.put(`/api/entities/${e}/active-version`, { version_id: "a", versionId: "b" });
    assert.equal([twice.status, twice.body.error], [400, "Invalid version_id: is given twice, as version_id and versionId: give it once"]);
    const negative = await svc.rest.get(`/api/entities/${e}/versions?page_size=-1`);
    assert.match(negative.body.error, "must not be negative: give 1 to 1000, or 0 (or none) for the default of 50");
  });

  s("HTTP/1.1 requests Node's parser refuses (a URL past the header limit, a header line without a colon, two Content-Lengths), one without Host and one whose Host is not a host and port get the JSON error shape and Connection: close, not a bare status (or a 500)", async ({ svc }) => {
    const port = Number(new URL(svc.url).port);
    const send = (text: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(port, "127.0.0.1");
        let got = "";
        socket.on("data", (d: Buffer) => (got += d.toString()));
        socket.on("error", reject);
        socket.on("close", () => resolve(got));
        socket.setTimeout(5_000, () => socket.destroy(new Error(`still open after 5 s: ${JSON.stringify(got)}`)));
        socket.write(text);
      });
    const e = newEntityId();
    const malformed = "The request could not be read: its request line or headers are not HTTP/1.1 as RFC 9112 writes it";
    const cases: Array<[string, string, number, string, string]> = [
      ["a URL past the header limit", `GET /api/entities/${e}/versions?q=${"x".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, "REQUEST_HEADERS_TOO_LARGE", "The request's URL and headers are larger than 16384 bytes together"],
      ["a header line without a colon", `GET /api/entities/${e}/versions HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n`, 400, "MALFORMED_REQUEST", malformed],
      ["two Content-Lengths", `POST /api/entities/${e}/versions/upload-url HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`, 400, "MALFORMED_REQUEST", malformed],
      ["no Host", `GET /api/entities/${e}/versions HTTP/1.1\r\n\r\n`, 400, "MALFORMED_REQUEST", "The request could not be read: it has no Host header"],
    ];
    // A Host that is not a host and port: Connect, which builds a URL on it, answered these 500 INTERNAL.
    const connectCall = (host: string) =>
      `POST /entityversions.v1.EntityAccessService/GetEntityAccess HTTP/1.1\r\n${host}Authorization: ${svc.rest.defaultHeaders["authorization"]}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    for (const [host, shown] of [["Host: a b\r\n", '"a b"'], ["Host: x:99999\r\n", '"x:99999"'], ["Host: exa%mple\r\n", '"exa%mple"'], ["Host: [::1\r\n", '"[::1"']]) {
      cases.push([`Host ${shown}`, connectCall(host!), 400, "MALFORMED_REQUEST", `The request could not be read: its Host header ${shown} is not a host name or address with an optional port`]);
    }
    for (const [label, text, status, code, message] of cases) {
      const answer = await send(text);
      const split = answer.indexOf("\r\n\r\n");
      const head = answer.slice(0, split);
      assert.match(head, new RegExp(`^HTTP/1\\.1 ${status} `), `${label}: ${answer}`);
      assert.match(head, /\r\nconnection: close(\r\n|$)/i, `${label}: ${head}`);
      assert.match(head, /\r\ncontent-type: application\/json/i, `${label}: ${head}`);
      const body = JSON.parse(answer.slice(split + 4)) as { error: string; code: string };
      assert.is(body.code, code, label);
      assert.match(body.error, message, label);
    }
    // HTTP/1.0 has no Host to require, and an empty Host is allowed (RFC 9112, 3.2): served on every
    // route, RPC too (Connect, which builds a URL on the Host, answered those 500 INTERNAL).
    assert.match(await send("GET /healthz HTTP/1.0\r\n\r\n"), /^HTTP\/1\.1 200 /);
    assert.match(await send("GET /healthz HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n"), /^HTTP\/1\.1 200 /);
    // An expectation other than 100-continue is ignored (RFC 9110, 10.1.1), not answered Node's bare 417.
    const expecting = await send(`POST /api/entities/${e}/versions/upload-url HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nAuthorization: ${svc.rest.defaultHeaders["authorization"]}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    assert.match(expecting, /^HTTP\/1\.1 400 /, expecting);
    assert.match(expecting, '"code":"INVALID_ARGUMENT"', "served: the body was read and checked");
    const session = http2.connect(svc.url);
    try {
      const req = session.request({ ":method": "GET", ":path": "/healthz", expect: "something-else" });
      req.end();
      assert.equal(await answerOf(req), { status: 200, text: '{"status":"ok"}' }, "the same over HTTP/2");
    } finally {
      session.close();
    }
    for (const [label, call] of [
      ["an empty Host", connectCall("Host:\r\n").replace("HTTP/1.1\r\n", "HTTP/1.1\r\nConnection: close\r\n")],
      ["HTTP/1.0 without Host", connectCall("").replace("HTTP/1.1\r\n", "HTTP/1.0\r\n")],
    ]) {
      assert.match(await send(call!), /^HTTP\/1\.1 400 [^]*"code":"invalid_argument","message":"Invalid entity_id: is required"/, label);
    }
    // A Host that is one, however written, is served.
    for (const host of ["Host: [::1]:8080\r\n", "Host: 127.0.0.1\r\n", "Host: Example.COM.:80\r\n"]) {
      assert.match(await send(connectCall(host).replace("HTTP/1.1\r\n", "HTTP/1.1\r\nConnection: close\r\n")), /^HTTP\/1\.1 400 [^]*"code":"invalid_argument","message":"Invalid entity_id: is required"/, host);
    }
    // Over HTTP/2 the same for :authority (an IPv6 address unbracketed).
    const h2Unbracketed = await h2Request(svc.url, `/entityversions.v1.EntityAccessService/GetEntityAccess`, { ":authority": "::1", "content-type": "application/json", authorization: svc.rest.defaultHeaders["authorization"]! }, "POST");
    assert.is(h2Unbracketed.status, 400, h2Unbracketed.body);
    assert.equal(JSON.parse(h2Unbracketed.body), {
      error: 'The request could not be read: its :authority "::1" is not a host name or address with an optional port (RFC 9110, 7.2): send the server\'s name, or its address (an IPv6 one in brackets), and its port',
      code: "MALFORMED_REQUEST",
    });
  });

  s("a URL refused before routing, its chunked HTTP/1.1 body unread, is answered with Connection: close, and that is the one answer its request gets when its client then stops sending", async ({ svc }) => {
    const port = Number(new URL(svc.url).port);
    const cases: Array<[string, string, string]> = [
      ["a bad escape", "/api/entities/%zz/versions/upload-url", "MALFORMED_REQUEST"],
      ["a path segment past 512 characters", `/api/entities/${"a".repeat(600)}/versions/upload-url`, "INVALID_ARGUMENT"],
    ];
    for (const [label, path, code] of cases) {
      const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true });
      let got = "";
      socket.on("data", (d: Buffer) => (got += d.toString()));
      const closed = new Promise<boolean>((resolve) => {
        socket.once("close", () => resolve(true));
        setTimeout(() => resolve(false), 5_000).unref();
      });
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${svc.rest.defaultHeaders["authorization"]}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n`);
      for (let i = 0; i < 100 && !got.includes("}"); i++) await new Promise((resolve) => setTimeout(resolve, 20));
      // The client gives up on its body.
      socket.end();
      assert.ok(await closed, `${label}: closed`);
      socket.destroy();
      assert.is(got.match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `${label}: ${got}`);
      assert.match(got, /^HTTP\/1\.1 400 [^]*\r\nconnection: close\r\n/i, `${label}: ${got}`);
      assert.match(got, `"code":"${code}"`, label);
    }
  });

  s("a chunked HTTP/1.1 body whose framing breaks as it comes (a bad chunk size, trailer fields past 16 KiB) is refused 400 MALFORMED_REQUEST saying so, not as a request line or headers, and logged once", async () => {
    const { logger, text } = memoryLogger("info");
    const svc = await startService(backend, { logger });
    try {
      const port = Number(new URL(svc.url).port);
      // Each case its own path: its log lines are told apart by it.
      const cases: Array<[string, string, string]> = [
        ["a bad chunk size (REST)", `/api/entities/${newEntityId()}/active-version`, '5\r\n{"ver\r\nzz\r\n'],
        ["trailer fields past 16 KiB (REST)", `/api/entities/${newEntityId()}/active-version`, `2\r\n{}\r\n0\r\nX-T: ${"a".repeat(20_000)}\r\n\r\n`],
        ["a bad chunk size (Connect)", "/entityversions.v1.EntityAccessService/GetEntityAccess", '5\r\n{"ent\r\nzz\r\n'],
      ];
      for (const [label, path, body] of cases) {
        const socket = net.connect(port, "127.0.0.1");
        socket.on("error", () => {});
        let got = "";
        socket.on("data", (d: Buffer) => (got += d.toString()));
        const closed = new Promise<boolean>((resolve) => {
          socket.once("close", () => resolve(true));
          setTimeout(() => resolve(false), 5_000).unref();
        });
        const method = path.startsWith("/api/") ? "PUT" : "POST";
        socket.write(`${method} ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${svc.rest.defaultHeaders["authorization"]}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
        // The handler has it, reading its body, when the body breaks.
        await new Promise((resolve) => setTimeout(resolve, 100));
        socket.write(body);
        assert.ok(await closed, `${label}: closed`);
        const split = got.indexOf("\r\n\r\n");
        assert.match(got.slice(0, split), /^HTTP\/1\.1 400 [^]*\r\nconnection: close/i, `${label}: ${got}`);
        const json = JSON.parse(got.slice(split + 4)) as { code: string; error: string };
        assert.is(json.code, "MALFORMED_REQUEST", label);
        assert.match(json.error, "The request could not be read: its body's chunked framing is not valid as RFC 9112 (7.1) writes it (", label);
        await new Promise((resolve) => setTimeout(resolve, 200));
        const lines = requestLines(text(), path);
        assert.equal(lines.map((l) => l.status), [400], `${label}: one log line, the refusal's: ${JSON.stringify(lines)}`);
      }
    } finally {
      await svc.close();
    }
  });

  s("an HTTP/1.1 client that hangs up partway through a request body (a half-close or a reset; a Content-Length or a chunked body) is not answered, and its call is counted and logged canceled (499), not MALFORMED_REQUEST", async () => {
    const { logger, text } = memoryLogger("info");
    const svc = await startService(backend, { logger });
    try {
      const port = Number(new URL(svc.url).port);
      for (const hangUp of ["half-close", "reset"] as const) {
        for (const framing of ["content-length", "chunked"] as const) {
          const path = "/entityversions.v1.EntityAccessService/GetEntityAccess";
          // Its log lines are those written from here.
          const logged = text().length;
          const label = `${hangUp}, ${framing}`;
          const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true });
          socket.on("error", () => {});
          let got = "";
          socket.on("data", (d: Buffer) => (got += d.toString()));
          const closed = new Promise<boolean>((resolve) => {
            socket.once("close", () => resolve(true));
            setTimeout(() => resolve(false), 5_000).unref();
          });
          socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${svc.rest.defaultHeaders["authorization"]}\r\nContent-Type: application/json\r\n${framing === "chunked" ? "Transfer-Encoding: chunked" : "Content-Length: 100"}\r\n\r\n`);
          // The handler has it, reading its body, when its client hangs up.
          await new Promise((resolve) => setTimeout(resolve, 100));
          socket.write(framing === "chunked" ? '5\r\n{"ent\r\n' : '{"ent');
          await new Promise((resolve) => setTimeout(resolve, 50));
          if (hangUp === "half-close") socket.end();
          else socket.resetAndDestroy();
          assert.ok(await closed, `${label}: closed`);
          assert.is(got, "", `${label}: no answer`);
          await new Promise((resolve) => setTimeout(resolve, 200));
          const lines = requestLines(text().slice(logged), path);
          assert.equal(lines.map((l) => [l.status, l.code, l.reason]), [[499, "canceled", undefined]], `${label}: ${JSON.stringify(lines)}`);
        }
      }
      const metrics = await (await fetch(`${svc.url}/metrics`)).text();
      const count = (code: string) =>
        Number(new RegExp(`entity_versions_rpc_requests_total\\{rpc="entityversions.v1.EntityAccessService/GetEntityAccess",protocol="connect",code="${code}"\\} (\\d+)`).exec(metrics)?.[1] ?? 0);
      assert.equal([count("canceled"), count("invalid_argument")], [4, 0], metrics.split("\n").filter((l) => l.includes("GetEntityAccess") && l.includes("_total")).join("\n"));
    } finally {
      await svc.close();
    }
  });

  s("no body is no body, whatever Content-Type says (clients that set it on every request, or label even nothing text/plain): a rule without a body is served, one with a body reads the empty message", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version.id as string;
    const v2 = (await push(svc, e, { base: v1 })).confirm!.body.version.id as string;
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    const send = async (method: string, url: string, headers: Record<string, string>) => {
      const res = await fetch(`${svc.url}${url}`, { method, headers: { ...auth, ...headers } });
      return { status: res.status, body: (await res.json()) as { code?: string } };
    };
    const json = { "content-type": "application/json" };
    assert.is((await send("PUT", `/api/entities/${e}/stores/public`, { ...json, "content-length": "0" })).status, 200);
    // A charset, even one REST refuses for a body, says nothing of no body.
    assert.is((await send("PUT", `/api/entities/${e}/stores/public`, { "content-type": "application/json; charset=iso-8859-1", "content-length": "0" })).status, 200);
    assert.is((await send("DELETE", `/api/entities/${e}/stores/public`, json)).status, 200);
    assert.is((await send("DELETE", `/api/entities/${e}/versions/${v2}`, json)).status, 200);
    // Whatever type it names (fetch sends a DELETE's Content-Length: 0 as no Content-Length at all).
    const plain = { "content-type": "text/plain", "content-length": "0" };
    assert.is((await send("PUT", `/api/entities/${e}/stores/public`, plain)).status, 200);
    assert.is((await send("DELETE", `/api/entities/${e}/stores/public`, plain)).status, 200);
    // Told by its end rather than by a header: an empty chunked HTTP/1.1 body, and over HTTP/2
    // an empty DATA frame after headers that neither end the stream nor give a length.
    const e2 = newEntityId();
    const deletable = (await push(svc, e2)).confirm!.body.version.id as string;
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${svc.url}/api/entities/${e}/stores/public`, { method: "PUT", headers: { ...auth, "content-type": "text/plain", "transfer-encoding": "chunked" } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      req.end();
    });
    assert.is(chunked, 200, "an empty chunked body");
    const session = http2.connect(svc.url);
    session.on("error", () => undefined);
    const h2 = (method: string, path: string, body: string | undefined) =>
      new Promise<number>((resolve) => {
        const req = session.request({ ":method": method, ":path": path, ...auth, "content-type": "text/plain" }, { endStream: false });
        let status = 0;
        req.on("response", (h) => (status = Number(h[":status"])));
        req.on("error", () => undefined);
        req.on("close", () => resolve(status));
        req.resume();
        req.end(body);
      });
    // The service runs in this process. Node warns of a Connection header
    // written to HTTP/2 only once a process, so the answers' headers are
    // watched where they are written instead.
    const written: string[] = [];
    const proto = http2.Http2ServerResponse.prototype;
    const { writeHead, setHeader } = proto;
    const note = (headers: unknown) => {
      if (typeof headers === "object" && headers !== null) written.push(...Object.keys(headers).map((k) => k.toLowerCase()));
    };
    proto.writeHead = function (this: http2.Http2ServerResponse, ...args: unknown[]) {
      note(args.find((a) => typeof a === "object"));
      return (writeHead as (...a: unknown[]) => http2.Http2ServerResponse).apply(this, args);
    } as typeof writeHead;
    proto.setHeader = function (this: http2.Http2ServerResponse, name: string, value: number | string | readonly string[]) {
      written.push(name.toLowerCase());
      return setHeader.call(this, name, value);
    };
    try {
      assert.is(await h2("DELETE", `/api/entities/${e}/stores/public`, undefined), 200, "HTTP/2, an empty DATA frame");
      // A body that does come, without a Content-Length, is still another type than JSON.
      assert.is(await h2("POST", `/api/entities/${e}/versions/upload-url`, "hello"), 415, "HTTP/2, text without a length");
      assert.is(await h2("DELETE", `/api/entities/${e2}/versions/${deletable}`, "hello"), 415, "and nothing is deleted");
      assert.ok(written.includes("content-type"), "the answers' headers were seen");
      assert.not.ok(written.includes("connection"), "a refused HTTP/2 body's answer carries no Connection header");
    } finally {
      proto.writeHead = writeHead;
      proto.setHeader = setHeader;
      session.close();
    }
    assert.is((await svc.rest.get(`/api/entities/${e2}/versions/${deletable}`)).status, 200);
    // A rule with a body: the empty message, refused for its missing fields, not as malformed JSON.
    const empty = await send("POST", `/api/entities/${e}/versions/upload-url`, { ...json, "content-length": "0" });
    assert.equal([empty.status, empty.body.code], [400, "INVALID_ARGUMENT"]);
  });

  s("an unknown field or query parameter is answered with what the caller may have meant and the names there are; a body that is not JSON says what to send", async ({ svc }) => {
    const e = newEntityId();
    const field = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { version: "2024.01.01-000000", source_hash: "ab", base_version: "x" });
    assert.is(field.body.code, "INVALID_ARGUMENT");
    assert.match(field.body.error, /^Invalid base_version: no such field \(did you mean base_version_id\?\); this request's fields are version, source_hash, base_version_id, force$/);
    assert.not.match(field.body.error, /entity_id/, "a path variable is not a body field");
    const huge = await svc.rest.post(`/api/entities/${e}/versions/upload-url`, { ["y".repeat(100_000)]: 1 });
    assert.match(huge.body.error, new RegExp(`^Invalid ${"y".repeat(64)}…: no such field; this request's fields are version,`), "a huge key is shown cut short");
    const query = await svc.rest.get(`/api/entities/${e}/versions?limit=5`);
    assert.match(query.body.error, /^Invalid limit: no such query parameter; this request's query parameters are page_size, page_token$/);
    const typo = await svc.rest.get(`/api/entities/${e}/versions?pageSise=5`);
    assert.match(typo.body.error, /\(did you mean page_size\?\)/);
    const notJson = await fetch(`${svc.url}/api/entities/${e}/versions/upload-url`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: svc.rest.defaultHeaders["authorization"]! },
      body: "{version: 1}",
    });
    assert.match(((await notJson.json()) as { error: string }).error, /^The request could not be read: the body is not valid JSON \(Expected property name .*\): send one JSON object of the request's fields \(listed at \/docs\)/);
    // JSON.parse would keep the last of two equal keys; protojson refuses them.
    const keyTwice = await fetch(`${svc.url}/api/entities/${e}/versions/upload-url`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: svc.rest.defaultHeaders["authorization"]! },
      body: '{"version": "2024.01.01-000000", "source_hash": "ab", "source_hash": "cd"}',
    });
    assert.equal([keyTwice.status, await keyTwice.json()], [400, { code: "MALFORMED_REQUEST", error: 'The request could not be read: the key "source_hash" appears twice in one JSON object: give each field once' }]);
    // Connect's JSON, read by protobuf-es, refuses a key given twice as well (in its own words).
    const connectTwice = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/ListVersions`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", authorization: svc.rest.defaultHeaders["authorization"]! },
      body: `{"entityId": "${e}", "entityId": "${e}"}`,
    });
    const connectAnswer = (await connectTwice.json()) as { code: string; message: string };
    assert.equal([connectTwice.status, connectAnswer.code], [400, "invalid_argument"]);
    assert.match(connectAnswer.message, 'duplicate object key "entityId"');
    const proto = await svc.rest.post(`/api/entities/${e}/versions/confirm`, { storage_path: "x", package_json: JSON.parse('{"__proto__": {"x": 1}}') });
    assert.equal([proto.status, proto.body.code], [400, "MALFORMED_REQUEST"]);
    assert.match(proto.body.error, 'the body has a "__proto__" key (or "constructor" with "prototype"), which no part of a request may have: rename or remove it');
    const inBody = await svc.rest.post(`/api/entities/${e}/versions/upload-url?version=1`, {});
    assert.match(inBody.body.error, /takes no query parameters: send its fields in the JSON body/);
    // A request whose rule has no body takes none (at most {}), rather than ignoring it.
    const v = (await push(svc, e)).confirm!.body.version;
    const withBody = await svc.rest.request("DELETE", `/api/entities/${e}/shares/someone`, { user_id: "someone-else" });
    assert.equal([withBody.status, withBody.body.code], [400, "MALFORMED_REQUEST"]);
    assert.match(withBody.body.error, /DELETE \/api\/entities\/[\w-]+\/shares\/someone takes no body \(at most \{\}\): its fields go in the path/);
    assert.is((await svc.rest.request("DELETE", `/api/entities/${e}/shares/someone`, {})).status, 200, "{} is no body");
    const nullBody = await svc.rest.request("DELETE", `/api/entities/${e}/shares/someone`, "null");
    assert.equal([nullBody.status, nullBody.body.code], [400, "MALFORMED_REQUEST"], "null is a body");
    // A GET's body is never read; one announced is refused from the headers rather than ignored.
    const getWithBody = await new Promise<{ status: number; body: { code: string; error: string } }>((resolve, reject) => {
      const r = http.request(
        `${svc.url}/api/entities/${e}/versions`,
        { method: "GET", headers: { authorization: svc.rest.defaultHeaders["authorization"]!, "content-type": "application/json", "content-length": "19" } },
        (res) => {
          let text = "";
          res.on("data", (c: Buffer) => (text += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
        },
      );
      r.on("error", reject);
      r.end('{"page_size":"abc"}');
    });
    assert.equal([getWithBody.status, getWithBody.body.code], [400, "MALFORMED_REQUEST"]);
    assert.match(getWithBody.body.error, /GET \/api\/entities\/[\w-]+\/versions takes no body: its fields go in the path and the query \(page_size, page_token\)/);
    // A body with no length is told by its arrival: a chunked GET that ends empty is no body, one that sends bytes is refused.
    const chunkedGet = (body: string) =>
      new Promise<{ status: number; code?: string }>((resolve, reject) => {
        const r = http.request(`${svc.url}/api/entities/${e}/versions`, { method: "GET", headers: { authorization: svc.rest.defaultHeaders["authorization"]!, "transfer-encoding": "chunked" } }, (res) => {
          let text = "";
          res.on("data", (c: Buffer) => (text += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode!, code: (JSON.parse(text) as { code?: string }).code }));
        });
        r.on("error", reject);
        r.end(body);
      });
    assert.equal(await chunkedGet(""), { status: 200, code: undefined }, "an empty chunked GET body is no body");
    assert.equal(await chunkedGet('{"page_size":1}'), { status: 400, code: "MALFORMED_REQUEST" }, "a chunked GET body that comes");
    // Over HTTP/2 a body needs neither Content-Type nor Content-Length; Fastify reads none for a GET or such a DELETE, so its arrival decides.
    const e3 = newEntityId();
    const deletable = (await push(svc, e3)).confirm!.body.version.id as string;
    const session = http2.connect(svc.url);
    session.on("error", () => undefined);
    const h2 = async (method: string, path: string, body: string) => {
      const req = session.request({ ":method": method, ":path": path, authorization: svc.rest.defaultHeaders["authorization"]! }, { endStream: false });
      const answered = answerOf(req);
      req.end(body);
      const { status, text } = await answered;
      return { status, code: (JSON.parse(text) as { code?: string }).code };
    };
    try {
      assert.equal(await h2("GET", `/api/entities/${e}/versions`, "{}x"), { status: 400, code: "MALFORMED_REQUEST" }, "HTTP/2 GET with an unannounced body");
      assert.equal(await h2("DELETE", `/api/entities/${e3}/versions/${deletable}`, '{"force":true}'), { status: 400, code: "MALFORMED_REQUEST" }, "HTTP/2 DELETE with an unannounced body");
      assert.is((await svc.rest.get(`/api/entities/${e3}/versions/${deletable}`)).status, 200, "and nothing is deleted");
      assert.equal(await h2("GET", `/api/entities/${e}/versions`, ""), { status: 200, code: undefined }, "HTTP/2 GET whose stream ends with an empty DATA frame");
    } finally {
      session.close();
    }
    // The path's fields are the path's.
    const other = await svc.rest.get(`/api/entities/${e}/versions?entity_id=${newEntityId()}`);
    assert.equal([other.status, other.body.code], [400, "INVALID_ARGUMENT"]);
    const contradicted = await svc.rest.put(`/api/entities/${e}/active-version`, { version_id: v.id, entity_id: newEntityId() });
    assert.match(contradicted.body.error, /^Invalid entity_id: is set by the path/);
    const otherSpelling = await svc.rest.put(`/api/entities/${e}/active-version`, { version_id: v.id, entity_id: e, entityId: newEntityId() });
    assert.match(otherSpelling.body.error, /^Invalid entity_id: is set by the path/);
    const twice = await svc.rest.get(`/api/entities/${e}/versions?page_size=1&pageSize=5`);
    assert.match(twice.body.error, /^Invalid page_size: is given more than once/);
  });

  s("REST takes a deadline in grpc-gateway's Grpc-Timeout header: a spent one is DEADLINE_EXCEEDED, a malformed one INVALID_ARGUMENT, one too long for a timer none", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const spent = await svc.rest.get(`/api/entities/${e}/active-version`, { "grpc-timeout": "0S" });
    assert.equal([spent.status, spent.body.code], [504, "DEADLINE_EXCEEDED"]);
    const malformed = await svc.rest.get(`/api/entities/${e}/active-version`, { "grpc-timeout": "5 seconds" });
    assert.equal([malformed.status, malformed.body.code], [400, "INVALID_ARGUMENT"]);
    assert.match(malformed.body.error, "Grpc-Timeout");
    for (const timeout of ["30S", "8760H"]) {
      const fine = await svc.rest.get(`/api/entities/${e}/active-version`, { "grpc-timeout": timeout });
      assert.equal([fine.status, fine.body.id], [200, v.id], timeout);
    }
  });

  s("content types are read case-insensitively, as Connect reads them: a refusal from the headers and a Trailers-Only answer keep their protocol", async ({ svc }) => {
    const rpc = "/entityversions.v1.EntityVersionsService/GetVersion";
    const message = toBinary(GetVersionRequestSchema, create(GetVersionRequestSchema, { entityId: newEntityId(), versionId: "v" }));
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
    const session = http2.connect(svc.url);
    const call = (headers: Record<string, string>, body: Buffer | string) =>
      new Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders | undefined; text: string }>((resolve, reject) => {
        const req = session.request({ ":method": "POST", ":path": rpc, te: "trailers", ...headers });
        let answer: http2.IncomingHttpHeaders = {};
        let trailers: http2.IncomingHttpHeaders | undefined;
        let text = "";
        req.on("response", (h) => (answer = h));
        req.on("trailers", (h) => (trailers = h));
        req.on("data", (d: Buffer) => (text += d.toString()));
        req.on("error", reject);
        req.on("close", () => resolve({ headers: answer, trailers, text }));
        req.end(body);
      });
    try {
      const auth = svc.rest.defaultHeaders["authorization"]!;
      const anonymous = await call({ "content-type": "APPLICATION/GRPC" }, envelope);
      assert.equal([anonymous.headers["grpc-status"], anonymous.trailers], ["16", undefined], JSON.stringify(anonymous));
      const connect = await call({ "content-type": "Application/JSON", "connect-protocol-version": "1" }, "{}");
      assert.equal([connect.headers[":status"], JSON.parse(connect.text).code], [401, "unauthenticated"], connect.text);
      const missing = await call({ "content-type": "Application/gRPC", authorization: auth }, envelope);
      assert.equal([missing.headers["grpc-status"], missing.trailers], ["5", undefined], "Trailers-Only, as for application/grpc");
      assert.not.match(String(missing.headers["grpc-message"]), "%20", "the minimal percent-encoding gRPC clients read whole");
    } finally {
      session.close();
    }
  });

  s("a REST path called with a method it does not take is 405, naming the methods it takes", async ({ svc }) => {
    const e = newEntityId();
    const res = await fetch(`${svc.url}/api/entities/${e}/active-version`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    const json = (await res.json()) as { code: string; error: string };
    assert.is(res.status, 405);
    assert.is(res.headers.get("allow"), "GET, HEAD, PUT");
    assert.is(json.code, "METHOD_NOT_ALLOWED");
    assert.match(json.error, /does not take POST; it takes GET, HEAD, PUT/);
    // A literal segment of one route where another method's route has a variable: the literal path is
    // its own resource (upload-url, POST only), not GetVersion or DeleteVersion of a version named so.
    for (const [method, path] of [["GET", "upload-url"], ["HEAD", "upload-url"], ["DELETE", "confirm"], ["PUT", "confirm"]] as const) {
      const wrong = await fetch(`${svc.url}/api/entities/${e}/versions/${path}`, { method });
      assert.equal([wrong.status, wrong.headers.get("allow")], [405, "POST"], `${method} ${path}`);
      if (method !== "HEAD") assert.match(((await wrong.json()) as { error: string }).error, /does not take \w+; it takes POST/);
    }
    // Without a token too, as any wrong method: the method is wrong whoever calls.
    const anonymous = await fetch(`${svc.url}/api/entities/${e}/versions/confirm`);
    assert.is(anonymous.status, 405);
    // Another value there is still a version id.
    assert.is((await svc.rest.get(`/api/entities/${e}/versions/upload-urls`)).body.code, "ENTITY_NOT_FOUND");
    // RPC paths too: POST, and GET where Connect takes one (a method without side effects); never HEAD.
    const rpc = `${svc.url}/entityversions.v1.EntityVersionsService`;
    for (const [method, path, allow] of [
      ["PUT", "GetVersion", "POST, GET"],
      ["HEAD", "GetVersion", "POST, GET"],
      ["DELETE", "SetActiveVersion", "POST"],
      ["GET", "SetActiveVersion", "POST"],
    ] as const) {
      const wrong = await fetch(`${rpc}/${path}`, { method });
      assert.equal([wrong.status, wrong.headers.get("allow")], [405, allow], `${method} ${path}`);
      if (method !== "HEAD") assert.is(((await wrong.json()) as { code: string }).code, "METHOD_NOT_ALLOWED");
    }
    // A Connect GET of a method with side effects: Connect's error JSON, which its clients read.
    const connectGet = await fetch(`${rpc}/ConfirmUpload?connect=v1&encoding=json&message=%7B%7D`, { headers: { authorization: svc.rest.defaultHeaders["authorization"]! } });
    const connectBody = (await connectGet.json()) as { code: string; message: string; details: { type: string }[] };
    assert.equal([connectGet.status, connectGet.headers.get("allow"), connectBody.code], [405, "POST", "unimplemented"]);
    assert.match(connectBody.message, "/entityversions.v1.EntityVersionsService/ConfirmUpload does not take GET; it takes POST");
    assert.is(connectBody.details[0]?.type, "google.rpc.ErrorInfo");
    const unknown = await fetch(`${svc.url}/api/nothing-here`);
    assert.is(unknown.status, 404);
    assert.match(((await unknown.json()) as { error: string }).error, /\/docs and in \/openapi\.json/);
  });

  s("the request id is taken from x-request-id or made, and returned", async ({ svc }) => {
    const given = await svc.rest.get(`/api/entities/${newEntityId()}/active-version`, { "x-request-id": "req-123" });
    assert.is(given.headers.get("x-request-id"), "req-123");
    const made = await svc.rest.get(`/api/entities/${newEntityId()}/active-version`);
    assert.match(made.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);
  });

  return s;
}

import { createHash } from "node:crypto";
import net from "node:net";
import { gzipSync } from "node:zlib";
import * as assert from "uvu/assert";
import type { Backend } from "../support/env.js";
import { GrpcClient, grpc, rawGrpc } from "../support/grpc-client.js";
import { memoryLogger, newEntityId, newSourceHash, nextVersionString, push, putBlob, startService } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

/** Every RPC through an independent @grpc/grpc-js client, with the rich error details. */
export function grpcSuite(backend: Backend) {
  const s = serviceSuite("gRPC: every RPC and its errors through @grpc/grpc-js", backend);

  s("a whole push, activation, download, listing and delete over gRPC", async ({ svc }) => {
    const e = newEntityId();
    const version = nextVersionString();
    const sourceHash = createHash("sha256").update(version).digest("hex");
    const up = await svc.grpc.call("GetUploadUrl", { entity_id: e, version, source_hash: sourceHash });
    assert.ok(up.ok, JSON.stringify(up));
    if (!up.ok) return;
    assert.is(up.value.existing_version, null);
    assert.is(await putBlob(up.value.upload_url, "grpc package", up.value.upload_headers), 201);
    const confirm = await svc.grpc.call("ConfirmUpload", {
      entity_id: e,
      storage_path: up.value.storage_path,
      version,
      source_hash: sourceHash,
      file_size_bytes: Buffer.byteLength("grpc package"),
      service_dependencies: ["svc-a"],
      package_json: { fields: { name: { stringValue: "pkg" } } },
    });
    assert.ok(confirm.ok, JSON.stringify(confirm));
    if (!confirm.ok) return;
    assert.is(confirm.value.created, true);
    const v = confirm.value.version;
    assert.is(v.entity_id, e);
    assert.is(v.file_size_bytes, 12);
    assert.is(v.published_by, "tester");
    assert.equal(v.package_json.fields.name.stringValue, "pkg");
    assert.ok(Number(v.created_at.seconds) > 1_700_000_000);

    const again = await svc.grpc.call("ConfirmUpload", { entity_id: e, storage_path: up.value.storage_path, version, source_hash: sourceHash, file_size_bytes: 12 });
    assert.ok(again.ok && again.value.created === false && again.value.version.id === v.id);

    const set = await svc.grpc.call("SetActiveVersion", { entity_id: e, version_id: v.id });
    assert.ok(set.ok && set.value.version.is_active === true);
    const active = await svc.grpc.call("GetActiveVersion", { entity_id: e });
    assert.ok(active.ok && active.value.version.id === v.id);
    const got = await svc.grpc.call("GetVersion", { entity_id: e, version_id: v.id });
    assert.ok(got.ok && got.value.version.version === version);
    const dl = await svc.grpc.call("GetDownloadUrl", { entity_id: e, version_id: v.id });
    assert.ok(dl.ok);
    if (dl.ok) assert.is(await (await fetch(dl.value.download_url)).text(), "grpc package");
    const list = await svc.grpc.call("ListVersions", { entity_id: e, page_size: 10 });
    assert.ok(list.ok && list.value.versions.length === 1 && list.value.next_page_token === "");

    const v2 = (await push(svc, e, { base: v.id })).confirm!.body.version;
    const del = await svc.grpc.call("DeleteVersion", { entity_id: e, version_id: v2.id });
    assert.ok(del.ok, JSON.stringify(del));
  });

  s("STALE_BASE is ABORTED with ErrorInfo and a StaleBase detail carrying the tip", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e)).confirm!.body.version;
    const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
    for (const force of [false, true]) {
      const r = await svc.grpc.call("GetUploadUrl", { entity_id: e, version: nextVersionString(), source_hash: newSourceHash(), base_version_id: v1.id, force });
      assert.not.ok(r.ok);
      if (r.ok) return;
      assert.is(r.error.code, grpc.status.ABORTED);
      assert.is(r.error.reason, "STALE_BASE");
      assert.is(r.error.metadata["tip_version_id"], v2.id);
      assert.is(r.error.staleBase?.latestVersion?.id, v2.id);
      assert.is(r.error.staleBase?.latestVersion?.version, v2.version);
      assert.is(r.error.staleBase?.latestVersion?.publishedBy, "tester");
      assert.match(r.error.message, "newer version was published");
    }
    const empty = await svc.grpc.call("GetUploadUrl", { entity_id: newEntityId(), version: nextVersionString(), source_hash: newSourceHash(), base_version_id: "x" });
    assert.ok(!empty.ok && empty.error.reason === "STALE_BASE" && empty.error.staleBase !== undefined && empty.error.staleBase.latestVersion === undefined);
  });

  s("each catalog error has its gRPC status and reason", async ({ svc }) => {
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const cases: Array<[string, object, grpc.status, string]> = [
      ["GetVersion", { entity_id: newEntityId(), version_id: "x" }, grpc.status.NOT_FOUND, "ENTITY_NOT_FOUND"],
      ["GetVersion", { entity_id: e, version_id: "x" }, grpc.status.NOT_FOUND, "VERSION_NOT_FOUND"],
      ["GetActiveVersion", { entity_id: "bad.id" }, grpc.status.INVALID_ARGUMENT, "INVALID_ARGUMENT"],
      ["DeleteVersion", { entity_id: e, version_id: v1.id }, grpc.status.FAILED_PRECONDITION, "ACTIVE_VERSION_NOT_DELETABLE"],
      ["GetUploadUrl", { entity_id: e, version: v1.version, source_hash: newSourceHash(), base_version_id: v1.id }, grpc.status.ALREADY_EXISTS, "VERSION_ALREADY_EXISTS"],
      ["ConfirmUpload", { entity_id: e, storage_path: `${e}/00000000-0000-4000-8000-000000000000/package`, version: nextVersionString(), source_hash: newSourceHash(), file_size_bytes: 5, base_version_id: v1.id }, grpc.status.FAILED_PRECONDITION, "UPLOAD_NOT_FOUND"],
      ["ListVersions", { entity_id: e, page_token: "nope" }, grpc.status.INVALID_ARGUMENT, "INVALID_ARGUMENT"],
    ];
    for (const [method, request, code, reason] of cases) {
      const r = await svc.grpc.call(method, request);
      assert.not.ok(r.ok, method);
      if (r.ok) continue;
      assert.is(r.error.code, code, `${method}: ${r.error.message}`);
      assert.is(r.error.reason, reason, method);
    }
    const bad = await svc.grpc.call("GetActiveVersion", { entity_id: "bad.id" });
    assert.ok(!bad.ok && bad.error.metadata["field"] === "entity_id");
  });

  s("grpc-js reads every status message whole, as REST sends it (no %3A or %2C left in it)", async ({ svc }) => {
    // Messages with ':', ',', '/', '"' and non-ASCII: grpc-js decodes grpc-message with decodeURI.
    const e = newEntityId();
    const cases: Array<[string, object, string]> = [
      ["GetActiveVersion", { entity_id: "bad.id" }, "/api/entities/bad.id/active-version"],
      ["GetVersion", { entity_id: e, version_id: "x/y" }, `/api/entities/${e}/versions/x%2Fy`],
      ["GetVersion", { entity_id: "é" }, "/api/entities/%C3%A9/versions/v"],
    ];
    for (const [method, request, path] of cases) {
      const r = await svc.grpc.call(method, request);
      const rest = await svc.rest.get(path);
      assert.not.ok(r.ok, method);
      if (r.ok) continue;
      assert.is(r.error.message, (rest.body as { error: string }).error, path);
      assert.not.match(r.error.message, /%[0-9A-F]{2}/);
    }
    // entity_id (field 1) "bad.id", framed: flag 0, then the length.
    const message = Buffer.concat([Buffer.from([0x0a, 6]), Buffer.from("bad.id")]);
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, message.length]), message]);
    const raw = await rawGrpc(svc.url, "/entityversions.v1.EntityVersionsService/GetActiveVersion", frame, {
      authorization: svc.rest.defaultHeaders["authorization"]!,
    });
    assert.match(String(raw.headers["grpc-message"]), /^[\x20-\x7e]+$/);
    assert.match(String(raw.headers["grpc-message"]), ":");
  });

  s("gzip-compressed calls are served too", async ({ svc }) => {
    const e = newEntityId();
    const v = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const gzip = new GrpcClient(svc.url.replace("http://", ""), svc.rest.defaultHeaders, { "grpc.default_compression_algorithm": 2 });
    try {
      const r = await gzip.call("GetActiveVersion", { entity_id: e });
      assert.ok(r.ok && r.value.version.id === v.id, JSON.stringify(r));
      const missing = await gzip.call("GetVersion", { entity_id: e, version_id: "nope" });
      assert.ok(!missing.ok && missing.error.reason === "VERSION_NOT_FOUND");
    } finally {
      gzip.close();
    }
  });

  s("a request over MAX_REQUEST_BYTES is RESOURCE_EXHAUSTED", async ({ svc }) => {
    const r = await svc.grpc.call("ConfirmUpload", { entity_id: newEntityId(), storage_path: "x".repeat(2 * 1024 * 1024) });
    assert.ok(!r.ok && r.error.code === grpc.status.RESOURCE_EXHAUSTED, JSON.stringify(r));
    // A client that goes on sending: answered, then the stream is ended by
    // the server (RST_STREAM NO_ERROR), not left open until the client gives up.
    const big = Buffer.alloc(5 + 4 * 1024 * 1024);
    big.writeUInt32BE(big.length - 5, 1);
    const raw = await rawGrpc(svc.url, "/entityversions.v1.EntityVersionsService/ConfirmUpload", big, { authorization: svc.rest.defaultHeaders["authorization"]! });
    assert.is(raw.headers["grpc-status"] ?? raw.trailers["grpc-status"], String(grpc.status.RESOURCE_EXHAUSTED));
    assert.is(raw.rstCode, 0);
  });

  s("raw frames: request id, trailers-only errors, and the gRPC docs' codes for bad frames, encodings and timeouts", async ({ svc }) => {
    const path = "/entityversions.v1.EntityVersionsService/GetActiveVersion";
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    // entity_id (field 1) "abc", framed: flag 0, length 5.
    const message = Buffer.from([0x0a, 0x03, 0x61, 0x62, 0x63]);
    const frame = (flag: number, body: Buffer) => {
      const out = Buffer.alloc(5 + body.length);
      out[0] = flag;
      out.writeUInt32BE(body.length, 1);
      body.copy(out, 5);
      return out;
    };
    const good = await rawGrpc(svc.url, path, frame(0, message), { ...auth, "x-request-id": "grpc-trace-1" });
    assert.is(good.headers[":status"], 200);
    assert.is(good.headers["x-request-id"], "grpc-trace-1");
    // An immediate error is Trailers-Only: grpc-status in the one HEADERS frame, no body, no trailers.
    assert.is(good.headers["grpc-status"], String(grpc.status.NOT_FOUND), "no version yet: NO_ACTIVE_VERSION");
    assert.is(good.trailers["grpc-status"], undefined);
    assert.is(good.body.length, 0);
    const made = await rawGrpc(svc.url, path, frame(0, message), { ...auth, "x-request-id": "bad id with spaces" });
    assert.match(String(made.headers["x-request-id"]), /^[0-9a-f-]{36}$/);

    const status = (r: Awaited<ReturnType<typeof rawGrpc>>) => r.headers["grpc-status"] ?? r.trailers["grpc-status"];
    // A length prefix that promises more than follows: Connect's INVALID_ARGUMENT.
    const truncated = await rawGrpc(svc.url, path, Buffer.concat([Buffer.from([0, 0, 0, 0, 9]), message]), auth);
    assert.is(status(truncated), String(grpc.status.INVALID_ARGUMENT));
    // gRPC statuscodes.md: "Error parsing request proto" and "Compressed flag set … but no encoding" are INTERNAL.
    const undecodable = await rawGrpc(svc.url, path, frame(0, Buffer.from([0xff, 0xff, 0xff])), auth);
    assert.is(status(undecodable), String(grpc.status.INTERNAL));
    const flagged = await rawGrpc(svc.url, path, frame(1, message), auth);
    assert.is(status(flagged), String(grpc.status.INTERNAL));
    // compression.md: an encoding the server does not support is UNIMPLEMENTED, naming those it accepts.
    const unsupported = await rawGrpc(svc.url, path, frame(1, message), { ...auth, "grpc-encoding": "snappy" });
    assert.is(status(unsupported), String(grpc.status.UNIMPLEMENTED));
    assert.match(String(unsupported.headers["grpc-accept-encoding"]), /gzip/);
    // PROTOCOL-HTTP2.md keeps HTTP 415 for content types that do not begin with application/grpc;
    // one that does, with a codec this server lacks, is answered as gRPC, with a status that says what to send.
    for (const contentType of ["application/grpc+xml", "application/grpc; charset=utf-8", "application/grpc-web+xml"]) {
      const codec = await rawGrpc(svc.url, path, frame(0, message), { ...auth, "content-type": contentType });
      assert.is(codec.headers[":status"], 200, contentType);
      assert.is(status(codec), String(grpc.status.INVALID_ARGUMENT), contentType);
      assert.match(decodeURIComponent(String(codec.headers["grpc-message"])), `Content-Type ${contentType} is not one this RPC takes`);
    }
    // Over HTTP/1.1 with its body unread, the connection is closed after the answer: it cannot carry the next request.
    const unread = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(new URL(svc.url).port), "127.0.0.1");
      let text = "";
      socket.on("data", (d: Buffer) => (text += d.toString("latin1")));
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
      socket.setTimeout(5_000, () => {
        socket.destroy();
        resolve(`${text}(still open after 5 s)`);
      });
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc-web+xml\r\nContent-Length: 100000\r\n\r\n${"x".repeat(1024)}`);
    });
    assert.match(unread, /^HTTP\/1\.1 200/);
    assert.match(unread, /connection: close/i);
    assert.not.match(unread, "still open");
    // gzip is read.
    const gzipped = await rawGrpc(svc.url, path, frame(1, gzipSync(message)), { ...auth, "grpc-encoding": "gzip" });
    assert.is(status(gzipped), String(grpc.status.NOT_FOUND));
    assert.is(decodeURIComponent(String(gzipped.headers["grpc-message"])).includes("abc"), true);
    // Content-coding names are case-insensitive (RFC 9110, 8.4.1).
    const shouted = await rawGrpc(svc.url, path, frame(1, gzipSync(message)), { ...auth, "grpc-encoding": "GZIP" });
    assert.is(status(shouted), String(grpc.status.NOT_FOUND), "GZIP is gzip");
    // A malformed grpc-timeout is refused as Connect refuses it; a well-formed one is a deadline.
    const badTimeout = await rawGrpc(svc.url, path, frame(0, message), { ...auth, "grpc-timeout": "garbage" });
    assert.is(status(badTimeout), String(grpc.status.INVALID_ARGUMENT));
    const okTimeout = await rawGrpc(svc.url, path, frame(0, message), { ...auth, "grpc-timeout": "5S" });
    assert.is(status(okTimeout), String(grpc.status.NOT_FOUND));
    // Every one of them counted, by its code, in the RPC metrics.
    const metrics = await (await fetch(`${svc.url}/metrics`)).text();
    const count = (code: string) =>
      Number(new RegExp(`entity_versions_rpc_requests_total\\{rpc="entityversions.v1.EntityVersionsService/GetActiveVersion",protocol="grpc",code="${code}"\\} (\\d+)`).exec(metrics)?.[1] ?? 0);
    assert.ok(count("internal") >= 2, metrics);
    assert.ok(count("unimplemented") >= 1, metrics);
    assert.ok(count("invalid_argument") >= 2, metrics);
  });

  s("a stream's request that breaks the protocol is answered as on unary calls (INTERNAL, Connect's message), not logged as a bug", async () => {
    const { logger, text } = memoryLogger("info");
    const svc = await startService(backend, { logger });
    try {
      const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
      const message = Buffer.concat([Buffer.from([0x0a, 3]), Buffer.from("abc")]);
      const flagged = Buffer.concat([Buffer.from([1, 0, 0, 0, message.length]), message]);
      const r = await rawGrpc(svc.url, "/entityversions.v1.EntityEventsService/WatchEvents", flagged, auth);
      const status = r.headers["grpc-status"] ?? r.trailers["grpc-status"];
      const said = decodeURIComponent(String(r.headers["grpc-message"] ?? r.trailers["grpc-message"]));
      assert.is(status, String(grpc.status.INTERNAL));
      assert.match(said, /compress/);
      assert.not.match(said, /has been logged/);
      const lines = text().split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as { level: number; msg: string });
      assert.equal(lines.filter((l) => l.level >= 50).map((l) => l.msg), [], "no error-level line");
    } finally {
      await svc.close();
    }
  });

  s("an unknown method is UNIMPLEMENTED in the caller's protocol, with a message saying how to list the methods", async ({ svc }) => {
    const client = new grpc.Client(svc.url.replace("http://", ""), grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError | null>((resolve) => {
      client.makeUnaryRequest("/entityversions.v1.EntityVersionsService/Nope", (x: Buffer) => x, (x: Buffer) => x, Buffer.alloc(0), (e) => resolve(e));
    });
    client.close();
    assert.is(err?.code, grpc.status.UNIMPLEMENTED);
    // The server's status, not one grpc-js made up from an HTTP 404.
    assert.match(String(err?.details), "No method /entityversions.v1.EntityVersionsService/Nope on this server");
    const raw = await rawGrpc(svc.url, "/foo.v1.Bar/Baz", Buffer.from([0, 0, 0, 0, 0]), {});
    assert.equal([raw.headers[":status"], raw.headers["grpc-status"], raw.body.length], [200, "12", 0]);
    assert.ok(raw.headers["grpc-status-details-bin"] !== undefined, "with ErrorInfo");
    const web = await fetch(`${svc.url}/foo.v1.Bar/Baz`, { method: "POST", headers: { "content-type": "application/grpc-web+proto" }, body: new Uint8Array(5) });
    assert.equal([web.status, web.headers.get("grpc-status")], [200, "12"]);
    // The answer names the request's codec: connect-go's clients take an answer in another
    // (application/grpc to an application/grpc+json call) as INTERNAL "invalid content-type".
    const json = Buffer.from([0, 0, 0, 0, 2, 0x7b, 0x7d]);
    for (const [sent, answered] of [
      ["application/grpc+json", "application/grpc+json"],
      ["application/grpc+proto", "application/grpc+proto"],
      ["application/grpc", "application/grpc"],
      ["application/grpc; charset=utf-8", "application/grpc"],
    ]) {
      const r = await rawGrpc(svc.url, "/foo.v1.Bar/Baz", json, { "content-type": sent! });
      assert.equal([r.headers["content-type"], r.headers["grpc-status"]], [answered, "12"], sent);
    }
    for (const type of ["application/grpc-web+json", "application/grpc-web+proto", "application/grpc-web"]) {
      const r = await fetch(`${svc.url}/foo.v1.Bar/Baz`, { method: "POST", headers: { "content-type": type }, body: json });
      assert.equal([r.headers.get("content-type"), r.headers.get("grpc-status")], [type, "12"], type);
    }
    const connect = await fetch(`${svc.url}/foo.v1.Bar/Baz`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    assert.is(connect.status, 404);
    const body = (await connect.json()) as { code: string; message: string; details: Array<{ type: string }> };
    assert.equal([body.code, body.details[0]?.type], ["unimplemented", "google.rpc.ErrorInfo"]);
    assert.match(body.message, "gRPC reflection");
    // A REST path is still answered as REST.
    const rest = await svc.rest.post("/api/nope", {});
    assert.equal([rest.status, rest.body.code], [404, "ROUTE_NOT_FOUND"]);
  });

  return s;
}

import { execFile } from "node:child_process";
import http from "node:http";
import http2 from "node:http2";
import path from "node:path";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { failure, rawGrpc } from "../support/grpc-client.js";
import { healthWatch, sessionFrom } from "../support/raw-h2.js";
import type { Backend } from "../support/env.js";
import { blobStoreWith, memoryLogger, newEntityId, push, startService, type TestService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const run = promisify(execFile);

const healthDefinition = protoLoader.loadSync("grpc/health/v1/health.proto", { includeDirs: [path.resolve("third_party/proto")], keepCase: true, enums: String, defaults: true });
const HealthClient = (grpc.loadPackageDefinition(healthDefinition) as any).grpc.health.v1.Health as grpc.ServiceClientConstructor;

function healthClient(svc: TestService) {
  return new HealthClient(svc.url.replace("http://", ""), grpc.credentials.createInsecure()) as grpc.Client & Record<string, Function>;
}

const reflectionDefinition = protoLoader.loadSync("grpc/reflection/v1/reflection.proto", { includeDirs: [path.resolve("third_party/proto")], keepCase: true, defaults: true, oneofs: true });
const ReflectionClient = (grpc.loadPackageDefinition(reflectionDefinition) as any).grpc.reflection.v1.ServerReflection as grpc.ServiceClientConstructor;

/** One reflection request through grpc-js: the names of the files answered, or the error. */
async function reflect(svc: TestService, request: object): Promise<{ files: string[]; error?: { error_code: number; error_message: string } }> {
  const client = new ReflectionClient(svc.url.replace("http://", ""), grpc.credentials.createInsecure()) as grpc.Client & Record<string, Function>;
  try {
    return await new Promise((resolve, reject) => {
      const stream = client["ServerReflectionInfo"]!.call(client) as grpc.ClientDuplexStream<object, any>;
      stream.once("data", (res: any) => {
        const descriptors: Buffer[] = res.file_descriptor_response?.file_descriptor_proto ?? [];
        // FileDescriptorProto field 1 is the file's name.
        const files = descriptors.map((d) => d.subarray(2, 2 + d[1]!).toString());
        resolve({ files, ...(res.error_response === null || res.error_response === undefined ? {} : { error: res.error_response }) });
        stream.end();
      });
      stream.once("error", reject);
      stream.write(request);
    });
  } finally {
    client.close();
  }
}

/** Health, readiness, reflection, metrics and request logs. */
export function opsSuite(backend: Backend) {
  const s = serviceSuite("operations: health, readiness, reflection, metrics", backend);

  s("/healthz and /readyz answer without a token", async ({ svc }) => {
    const anonymous = svc.restAs({});
    assert.equal((await anonymous.get("/healthz")).body, { status: "ok" });
    const ready = await anonymous.get("/readyz");
    assert.is(ready.status, 200);
    // On SQLite the service holds its data folder, and checks that it is still there.
    const folder = backend === "sqlite" ? { data_dir: "ok" } : {};
    assert.equal(ready.body, { status: "ready", checks: { database: "ok", blob_store: "ok", ...folder } });
  });

  s("a fixed path called with another method is 405 METHOD_NOT_ALLOWED with Allow, not 404", async ({ svc }) => {
    for (const [method, path] of [["POST", "/healthz"], ["DELETE", "/readyz"], ["PUT", "/openapi.json"], ["POST", "/docs"]] as const) {
      const res = await fetch(`${svc.url}${path}`, { method, headers: { "content-type": "application/json" }, body: method === "DELETE" ? undefined : "{}" });
      const body = (await res.json()) as { code?: string; error?: string };
      assert.is(res.status, 405, `${method} ${path}`);
      assert.is(res.headers.get("allow"), "GET, HEAD", `${method} ${path}`);
      assert.is(body.code, "METHOD_NOT_ALLOWED");
      assert.match(body.error ?? "", "takes GET, HEAD");
    }
    assert.is((await fetch(`${svc.url}/healthz/nope`, { method: "POST" })).status, 404, "a path nothing serves is still 404");
  });

  s("grpc.health.v1.Health: Check, an unknown service, Watch and List", async ({ svc }) => {
    const client = healthClient(svc);
    try {
      const check = (service: string) =>
        new Promise<{ err: grpc.ServiceError | null; res: { status: string } }>((resolve) =>
          client["Check"]!.call(client, { service }, (err: grpc.ServiceError | null, res: { status: string }) => resolve({ err, res })),
        );
      assert.is((await check("")).res.status, "SERVING");
      assert.is((await check("entityversions.v1.EntityVersionsService")).res.status, "SERVING");
      assert.is((await check("nope.Service")).err?.code, grpc.status.NOT_FOUND);
      const first = await new Promise<string>((resolve, reject) => {
        const stream = client["Watch"]!.call(client, { service: "entityversions.v1.EntityAccessService" }) as grpc.ClientReadableStream<{ status: string }>;
        stream.once("data", (msg: { status: string }) => {
          resolve(msg.status);
          stream.cancel();
        });
        stream.once("error", (err: grpc.ServiceError) => err.code !== grpc.status.CANCELLED && reject(err));
      });
      assert.is(first, "SERVING");
      // health.proto: an unknown service is SERVICE_UNKNOWN, and the call is
      // not ended (a client reopens a watch that ends).
      const unknown = await new Promise<{ status: string; endedWithin: boolean }>((resolve, reject) => {
        const stream = client["Watch"]!.call(client, { service: "nope.Service" }) as grpc.ClientReadableStream<{ status: string }>;
        let ended = false;
        stream.on("status", () => (ended = true));
        stream.on("error", (err: grpc.ServiceError) => err.code !== grpc.status.CANCELLED && reject(err));
        stream.once("data", (msg: { status: string }) =>
          setTimeout(() => {
            resolve({ status: msg.status, endedWithin: ended });
            stream.cancel();
          }, 300),
        );
      });
      assert.equal(unknown, { status: "SERVICE_UNKNOWN", endedWithin: false });
      const list = await new Promise<{ statuses: Record<string, { status: string }> }>((resolve, reject) =>
        client["List"]!.call(client, {}, (err: Error | null, res: { statuses: Record<string, { status: string }> }) => (err ? reject(err) : resolve(res))),
      );
      assert.equal(Object.keys(list.statuses).sort(), ["", "entityversions.v1.EntityAccessService", "entityversions.v1.EntityEventsService", "entityversions.v1.EntityVersionsService"]);
    } finally {
      client.close();
    }
  });

  s("streams that need no token are capped: past HTTP_MAX_OPEN_STREAMS, or a quarter of it from one address over any number of connections, a health Watch or reflection stream is TOO_MANY_STREAMS until one ends; Check still answers", async () => {
    // Eight places: two per address.
    const svc = await startService(backend, { env: { HTTP_MAX_OPEN_STREAMS: "8" } });
    const target = svc.url.replace("http://", "");
    // A channel of its own is a connection of its own.
    const own = { "grpc.use_local_subchannel_pool": 1 };
    const clients: grpc.Client[] = [];
    const open: Array<{ cancel(): void }> = [];
    const sessions: http2.ClientHttp2Session[] = [];
    /** Opens a health Watch on a client: its first status, or the error it ended with. */
    const watch = (client: grpc.Client & Record<string, Function>) =>
      new Promise<{ status?: string; error?: grpc.ServiceError }>((resolve) => {
        const stream = client["Watch"]!.call(client, { service: "" }) as grpc.ClientReadableStream<{ status: string }>;
        open.push(stream);
        stream.once("data", (msg: { status: string }) => resolve({ status: msg.status }));
        stream.once("error", (error: grpc.ServiceError) => resolve({ error }));
      });
    const connection = () => {
      const client = new HealthClient(target, grpc.credentials.createInsecure(), own) as grpc.Client & Record<string, Function>;
      clients.push(client);
      return client;
    };
    /** A Watch from another address (grpc-js cannot choose its own). */
    const watchFrom = (localAddress: string) => {
      const session = sessionFrom(svc.url, localAddress);
      sessions.push(session);
      return healthWatch(session).first;
    };
    try {
      const first = connection();
      assert.is((await watch(first)).status, "SERVING");
      // A reflection stream, on a connection of its own, takes the address's second place.
      const reflection = new ReflectionClient(target, grpc.credentials.createInsecure(), own) as grpc.Client & Record<string, Function>;
      clients.push(reflection);
      const info = reflection["ServerReflectionInfo"]!.call(reflection) as grpc.ClientDuplexStream<object, unknown>;
      open.push(info);
      info.on("error", () => undefined);
      await new Promise((resolve) => {
        info.once("data", resolve);
        info.write({ list_services: "" });
      });
      // A third connection from the same address: refused, for the address.
      const refusedHere = await watch(connection());
      assert.is(refusedHere.error?.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(refusedHere.error?.details ?? "", /^This address already has 2 health Watch and reflection streams open/);
      assert.equal(failure(refusedHere.error!).metadata, { limit: "2", scope: "peer" });
      for (const address of ["127.0.0.2", "127.0.0.3", "127.0.0.4"]) {
        assert.equal(await watchFrom(address), { served: true }, address);
        assert.equal(await watchFrom(address), { served: true }, address);
      }
      // Eight open: another address is refused by the server's cap.
      assert.equal(await watchFrom("127.0.0.5"), { served: false, status: String(grpc.status.RESOURCE_EXHAUSTED), metadata: { limit: "8", scope: "server" } });
      const check = await new Promise<{ status: string }>((resolve, reject) =>
        first["Check"]!.call(first, { service: "" }, (err: grpc.ServiceError | null, res: { status: string }) => (err ? reject(err) : resolve(res))),
      );
      assert.is(check.status, "SERVING", "Check is not a stream");
      // A place comes back when a stream ends, however it ends.
      open[0]!.cancel();
      const late = connection();
      let again: { status?: string; error?: grpc.ServiceError } = {};
      for (let tries = 0; tries < 50 && again.status === undefined; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        again = await watch(late);
      }
      assert.is(again.status, "SERVING", JSON.stringify(again.error?.details));
    } finally {
      for (const stream of open) stream.cancel();
      for (const client of clients) client.close();
      for (const session of sessions) session.destroy();
      await svc.close();
    }
  });

  s("gRPC reflection: buf curl lists the services and calls one with no proto at hand", async ({ svc }) => {
    const buf = path.resolve("node_modules/.bin/buf");
    const { stdout } = await run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-services", svc.url]);
    assert.equal(stdout.trim().split("\n").sort(), [
      "entityversions.v1.EntityAccessService",
      "entityversions.v1.EntityEventsService",
      "entityversions.v1.EntityVersionsService",
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]);
    // Tools that speak only the older name of the protocol list the same.
    const alpha = await run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--reflect-protocol", "grpc-v1alpha", "--list-services", svc.url]);
    assert.equal(alpha.stdout.trim().split("\n").sort(), stdout.trim().split("\n").sort());
    const methods = await run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", svc.url]);
    assert.match(methods.stdout, "entityversions.v1.EntityVersionsService/ConfirmUpload");
    const e = newEntityId();
    const v = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const called = await run(buf, [
      "curl", "--protocol", "grpc", "--http2-prior-knowledge",
      "-H", `authorization: ${svc.rest.defaultHeaders["authorization"]}`,
      "-d", JSON.stringify({ entityId: e }),
      `${svc.url}/entityversions.v1.EntityVersionsService/GetActiveVersion`,
    ]);
    assert.is(JSON.parse(called.stdout).version.id, v.id);
  });

  s("gRPC reflection answers files by their own names (with .proto) and the error detail types", async ({ svc }) => {
    const byName = await reflect(svc, { file_by_filename: "entityversions/v1/entity_versions.proto" });
    assert.is(byName.files[0], "entityversions/v1/entity_versions.proto");
    assert.ok(byName.files.includes("google/protobuf/timestamp.proto"), "with its imports");
    assert.is((await reflect(svc, { file_by_filename: "google/protobuf/timestamp.proto" })).files[0], "google/protobuf/timestamp.proto");
    const missing = await reflect(svc, { file_by_filename: "entityversions/v1/entity_versions" });
    assert.is(missing.error?.error_code, grpc.status.NOT_FOUND);
    assert.is((await reflect(svc, { file_containing_symbol: "google.rpc.ErrorInfo" })).files[0], "google/rpc/error_details.proto");
    assert.is((await reflect(svc, { file_containing_symbol: "entityversions.v1.StaleBase" })).files[0]?.startsWith("entityversions/v1/"), true);
    // Any fully-qualified name, as grpc-go resolves it: a method, a field, a oneof, an enum value.
    for (const symbol of [
      "entityversions.v1.EntityEventsService.WatchEvents",
      "entityversions.v1.WatchEventsResponse.kind",
      "entityversions.v1.Version.id",
      "entityversions.v1.EVENT_TYPE_VERSION_CREATED",
      "grpc.health.v1.HealthCheckResponse.SERVING",
    ]) {
      assert.is((await reflect(svc, { file_containing_symbol: symbol })).files.length > 0, true, symbol);
    }
    for (const symbol of ["entityversions.v1.Version.nope", "entityversions.v1.NOPE", "entityversions.v1.Version.EVENT_TYPE_VERSION_CREATED"]) {
      assert.is((await reflect(svc, { file_containing_symbol: symbol })).error?.error_code, grpc.status.NOT_FOUND, symbol);
    }
  });

  s("/metrics counts a health Watch its client resets just after sending it (canceled), as it logs it", async ({ svc }) => {
    const counted = async () => {
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      return Number(/entity_versions_rpc_requests_total\{rpc="grpc.health.v1.Health\/Watch",protocol="grpc",code="canceled"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    const before = await counted();
    const session = http2.connect(svc.url);
    session.on("error", () => {});
    try {
      // Reset while the call is starting: it may or may not have sent its
      // first message; whichever, it ended, and is counted.
      for (const afterMs of [0, 0, 1, 1, 2, 2, 5, 5, 10, 10]) {
        const watch = healthWatch(session);
        await new Promise((resolve) => setTimeout(resolve, afterMs));
        watch.stream.close(http2.constants.NGHTTP2_CANCEL);
        await new Promise((resolve) => watch.stream.once("close", resolve));
      }
      let after = await counted();
      for (let tries = 0; after - before < 10 && tries < 50; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        after = await counted();
      }
      const lines = (await (await fetch(`${svc.url}/metrics`)).text()).split("\n").filter((l) => l.startsWith('entity_versions_rpc_requests_total{rpc="grpc.health.v1.Health/Watch"'));
      assert.is(after - before, 10, lines.join("\n"));
    } finally {
      session.destroy();
    }
  });

  s("/metrics counts RPCs by code, STALE_BASE conflicts, pool use and pending deletions", async ({ svc }) => {
    const e = newEntityId();
    await push(svc, e);
    const stale = await push(svc, e);
    assert.is(stale.res.status, 409);
    await svc.grpc.call("GetVersion", { entity_id: e, version_id: "nope" });
    // A body that does not decode, answered by Connect before any interceptor
    // (INTERNAL, as gRPC's status code doc has it): still counted under its protocol.
    const garbled = await fetch(`${svc.url}/entityversions.v1.EntityVersionsService/GetVersion`, {
      method: "POST",
      headers: { "content-type": "application/proto", ...svc.rest.defaultHeaders },
      body: new Uint8Array([0x0a, 0x7f, 0x01]),
    });
    assert.is(garbled.status, 500);
    const res = await fetch(`${svc.url}/metrics`);
    assert.is(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", "text/plain");
    const text = await res.text();
    const value = (pattern: RegExp) => Number(pattern.exec(text)?.[1] ?? Number.NaN);
    assert.ok(value(/entity_versions_rpc_requests_total\{rpc="entityversions.v1.EntityVersionsService\/ConfirmUpload",protocol="rest",code="ok"\} (\d+)/) >= 1, "confirm counted");
    assert.ok(value(/entity_versions_rpc_requests_total\{rpc="entityversions.v1.EntityVersionsService\/GetVersion",protocol="grpc",code="not_found"\} (\d+)/) >= 1, "gRPC not_found counted");
    assert.ok(value(/entity_versions_rpc_requests_total\{rpc="entityversions.v1.EntityVersionsService\/GetVersion",protocol="connect",code="internal"\} (\d+)/) >= 1, "undecodable body counted under connect");
    assert.ok(value(/entity_versions_stale_base_total\{rpc="entityversions.v1.EntityVersionsService\/GetUploadUrl"\} (\d+)/) >= 1, "STALE_BASE counted");
    assert.match(text, /entity_versions_rpc_duration_seconds_bucket\{le="0.005",rpc="entityversions.v1.EntityVersionsService\/GetUploadUrl",code="ok"\}/);
    assert.match(text, /entity_versions_blob_deletions_pending \d+/);
    assert.match(text, /entity_versions_process_resident_memory_bytes \d+/);
    if (backend === "mysql") assert.match(text, /entity_versions_db_pool_connections\{state="used"\} \d+/);
  });

  s("scrapes that come together share one rendering of /metrics; the next one sees fresh figures", async () => {
    const svc = await startService(backend);
    const registry = svc.app.metrics.registry;
    const render = registry.metrics.bind(registry);
    let renderings = 0;
    registry.metrics = async () => {
      renderings++;
      return render();
    };
    try {
      const session = http2.connect(svc.url);
      session.on("error", () => {});
      const bodies = await Promise.all(
        Array.from(
          { length: 50 },
          () =>
            new Promise<string>((resolve) => {
              const req = session.request({ ":path": "/metrics" });
              let text = "";
              req.setEncoding("utf8");
              req.on("data", (d: string) => (text += d));
              req.on("end", () => resolve(text));
              req.on("error", () => resolve(""));
            }),
        ),
      );
      session.close();
      assert.ok(bodies.every((b) => b.includes("entity_versions_rpc_requests_total")), "every scrape answered");
      assert.ok(renderings < 10, `${renderings} renderings for 50 scrapes at once`);
      const before = renderings;
      await svc.grpc.call("GetVersion", { entity_id: newEntityId(), version_id: "fresh" });
      const after = await (await fetch(`${svc.url}/metrics`)).text();
      assert.is(renderings, before + 1, "a later scrape renders again");
      assert.match(after, /protocol="grpc",code="not_found"/);
    } finally {
      registry.metrics = render;
      await svc.close();
    }
  });

  return s;
}

/** One log line per request, and no secrets in any line. */
export function logsSuite(backend: Backend) {
  const s = suite(`${backend}: operations: request logs`);

  s("one JSON line per request: request id, RPC, protocol, status, code, duration; no token or SAS signature", async () => {
    const { logger, text } = memoryLogger();
    const svc = await startService(backend, { logger });
    try {
      const e = newEntityId();
      const p = await push(svc, e);
      await svc.rest.get(`/api/entities/${e}/versions/${p.confirm!.body.version.id}/download`, { "x-request-id": "trace-me-1" });
      await svc.grpc.call("GetActiveVersion", { entity_id: e });
      // A frame whose length prefix (9) is not what follows (0 bytes).
      await rawGrpc(svc.url, "/entityversions.v1.EntityVersionsService/GetVersion", Buffer.from([0, 0, 0, 0, 9]), {
        "x-request-id": "bad-frame-1",
        authorization: svc.rest.defaultHeaders["authorization"]!,
      });
      // A URL refused before routing (a "%" that starts no escape): named and logged all the same.
      const badUrl = await svc.rest.get(`/api/entities/%ZZ/versions`, { "x-request-id": "bad-url-1" });
      assert.equal([badUrl.status, badUrl.body.code, badUrl.headers.get("x-request-id")], [400, "MALFORMED_REQUEST", "bad-url-1"]);
      assert.match(badUrl.body.error, "percent-encode it as RFC 3986 says");
      // The query is not repeated (it may carry what a client keeps secret).
      const badUrlQuery = await svc.rest.get(`/api/entities/%ZZ/versions?access_token=secret-in-query`);
      assert.equal([badUrlQuery.status, badUrlQuery.body.code], [400, "MALFORMED_REQUEST"]);
      assert.match(badUrlQuery.body.error, "/api/entities/%ZZ/versions?… is not valid");
      assert.not.match(JSON.stringify(badUrlQuery.body), "secret-in-query");
      const logs = text();
      const lines = logs.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
      const requests = lines.filter((l) => l["msg"] === "request");
      assert.equal(
        requests.filter((l) => l["reqId"] === "bad-url-1").map((l) => [l["status"], l["reason"]]),
        [[400, "MALFORMED_REQUEST"]],
      );
      const download = requests.filter((l) => l["reqId"] === "trace-me-1");
      assert.is(download.length, 1, "exactly one line for the request");
      assert.equal(
        { rpc: download[0]!["rpc"], protocol: download[0]!["protocol"], code: download[0]!["code"], status: download[0]!["status"] },
        { rpc: "entityversions.v1.EntityVersionsService/GetDownloadUrl", protocol: "rest", code: "ok", status: 200 },
      );
      assert.type(download[0]!["durationMs"], "number");
      const grpcLine = requests.find((l) => l["protocol"] === "grpc");
      assert.equal(
        { rpc: grpcLine?.["rpc"], code: grpcLine?.["code"], reason: grpcLine?.["reason"], status: grpcLine?.["status"] },
        { rpc: "entityversions.v1.EntityVersionsService/GetActiveVersion", code: "not_found", reason: "NO_ACTIVE_VERSION", status: 200 },
      );
      // Refused before any interceptor ran, and still one line with its RPC and reason.
      const badFrame = requests.filter((l) => l["reqId"] === "bad-frame-1");
      assert.equal(
        badFrame.map((l) => [l["rpc"], l["protocol"], l["status"]]),
        [["entityversions.v1.EntityVersionsService/GetVersion", "grpc", 200]],
      );
      // Connect's own status for the bad frame, read from the answer.
      assert.match(String(badFrame[0]!["code"]), /^(?!ok$)[a-z_]+$/);
      assert.ok(requests.every((l) => typeof l["reqId"] === "string"));
      assert.not.match(logs, /sig=|SharedKey|Bearer|eyJ/);
      assert.not.match(logs, p.res.body.upload_url.split("?")[1]!);
    } finally {
      await svc.close();
    }
  });

  s("a long path is cut in the log line and the refusal: a client cannot make either as long as it likes", async () => {
    const { logger, text } = memoryLogger();
    const svc = await startService(backend, { logger });
    try {
      const long = `/${"a".repeat(5_000)}`;
      const rest = await svc.rest.get(long, { "x-request-id": "long-rest" });
      assert.equal([rest.status, rest.body.code], [404, "ROUTE_NOT_FOUND"]);
      assert.ok(rest.body.error.length < 600, `the message is ${rest.body.error.length} characters`);
      const rpc = await fetch(`${svc.url}/x.Y/${"B".repeat(5_000)}`, { method: "POST", headers: { "content-type": "application/json", "x-request-id": "long-rpc" }, body: "{}" });
      const rpcBody = (await rpc.json()) as { message: string };
      assert.is(rpc.status, 404);
      assert.ok(rpcBody.message.length < 600, `the message is ${rpcBody.message.length} characters`);
      const lines = text().trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
      for (const id of ["long-rest", "long-rpc"]) {
        const line = lines.find((l) => l["msg"] === "request" && l["reqId"] === id);
        assert.ok(line !== undefined, `a line for ${id}`);
        assert.ok(String(line["path"]).length <= 201, `${id}: a path of ${String(line["path"]).length} characters`);
      }
    } finally {
      await svc.close();
    }
  });

  s("a call its client cancels over HTTP/1.1 is still one line, 499 canceled, and counted", async () => {
    const { logger, text } = memoryLogger();
    const slowStat = { slow: false };
    const svc = await startService(backend, {
      logger,
      // A confirm's check of its upload takes long enough to be cancelled while it runs.
      blobStore: (store) =>
        blobStoreWith(store, {
          stat: async (path, signal) => {
            if (slowStat.slow) await new Promise((resolve) => (signal?.addEventListener("abort", resolve), setTimeout(resolve, 5_000)));
            return store.stat(path, signal);
          },
        }),
    });
    try {
      const e = newEntityId();
      const v1 = (await push(svc, e)).confirm!.body.version;
      const up = await uploadOnly(svc, e, { base: v1.id });
      const body = JSON.stringify({ storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content), base_version_id: v1.id });
      const auth = svc.rest.defaultHeaders["authorization"]!;
      slowStat.slow = true;
      for (const [id, path, type] of [
        ["cancel-rest", `/api/entities/${e}/versions/confirm`, "application/json"],
        ["cancel-connect", "/entityversions.v1.EntityVersionsService/ConfirmUpload", "application/json"],
      ] as const) {
        const req = http.request(`${svc.url}${path}`, { method: "POST", headers: { authorization: auth, "content-type": type, "x-request-id": id } });
        req.on("error", () => undefined);
        // Connect's body is the whole request message; REST's path holds the entity.
        req.end(id === "cancel-connect" ? JSON.stringify({ ...JSON.parse(body), entity_id: e }) : body);
        await sleep(300);
        req.destroy();
      }
      await sleep(1_500);
      slowStat.slow = false;
      const requests = text()
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l["msg"] === "request");
      for (const id of ["cancel-rest", "cancel-connect"]) {
        const lines = requests.filter((l) => l["reqId"] === id);
        assert.equal(
          lines.map((l) => [l["rpc"], l["status"], l["code"]]),
          [["entityversions.v1.EntityVersionsService/ConfirmUpload", 499, "canceled"]],
          `${id}: ${JSON.stringify(lines)}`,
        );
      }
      const metrics = await (await fetch(`${svc.url}/metrics`)).text();
      for (const protocol of ["rest", "connect"]) {
        assert.match(metrics, `entity_versions_rpc_requests_total{rpc="entityversions.v1.EntityVersionsService/ConfirmUpload",protocol="${protocol}",code="canceled"} 1`);
      }
    } finally {
      await svc.close();
    }
  });

  return s;
}

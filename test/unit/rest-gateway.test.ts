// The REST gateway is generic: routes come from google.api.http rules alone.
// A fixture service (test/fixtures/proto), built by buf at test time, is
// served with no route code; the real service's rules are the spec's paths.
import { execFileSync } from "node:child_process";
import { clone, create, createFileRegistry, type DescMessage, type DescService, fromBinary, type Message, setExtension } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { get as httpGet } from "node:http";
import type { AddressInfo } from "node:net";
import Fastify from "fastify";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { http } from "../../gen/google/api/annotations_pb.js";
import { HttpRuleSchema } from "../../gen/google/api/http_pb.js";
import { EntityEventsService } from "../../gen/entityversions/v1/entity_events_pb.js";
import { EntityVersionsService } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { apiError } from "../../src/errors/api-error.js";
import { restBindings } from "../../src/rest/http-rules.js";
import { registerRestGateway } from "../../src/rest/rest-gateway.js";

const image = execFileSync("node_modules/.bin/buf", ["build", "--path", "test/fixtures/proto/fixture/v1/fixture.proto", "-o", "-"]);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, image));
const fixture = registry.getService("fixture.v1.FixtureService") as DescService;
const echoResponse = registry.getMessage("fixture.v1.EchoResponse") as DescMessage;
const watchResponse = registry.getMessage("fixture.v1.WatchShapesResponse") as DescMessage;

/** A stream caller for gateways that serve no stream in the test. */
const noStreams = async () => {
  throw new Error("no stream is called in this test");
};

async function gateway() {
  const app = Fastify();
  registerRestGateway(app, {
    services: [fixture],
    call: async (_method, input) => ({
      message: create(echoResponse, { request: input } as never) as Message,
      header: new Headers({ "x-echo": "1" }),
      trailer: new Headers(),
    }),
    callStream: noStreams,
    contextValues: () => createContextValues(),
    outcome: () => ({}),
    refused: () => false,
    toError: (error) => ConnectError.from(error),
  });
  await app.ready();
  return app;
}

test("the spec's six paths and the two added ones come from the proto's rules", () => {
  const rules = restBindings([EntityVersionsService], http).map((b) => `${b.method.name} ${b.verb} ${b.template}`);
  assert.equal(rules, [
    "GetUploadUrl POST /api/entities/{entity_id}/versions/upload-url",
    "ConfirmUpload POST /api/entities/{entity_id}/versions/confirm",
    "GetDownloadUrl GET /api/entities/{entity_id}/versions/{version_id}/download",
    "GetActiveVersion GET /api/entities/{entity_id}/active-version",
    "SetActiveVersion PUT /api/entities/{entity_id}/active-version",
    "DeleteVersion DELETE /api/entities/{entity_id}/versions/{version_id}",
    "ListVersions GET /api/entities/{entity_id}/versions",
    "GetVersion GET /api/entities/{entity_id}/versions/{version_id}",
  ]);
});

test("an annotated RPC of another service is served: nested path variables, field body, query, headers", async () => {
  const app = await gateway();
  const res = await app.inject({
    method: "POST",
    url: "/v1/shelves/top/things/t-1?loud=true&tags=a&tags=b&count=7",
    payload: { text: "hi" },
  });
  assert.is(res.statusCode, 200, res.body);
  assert.is(res.headers["x-echo"], "1");
  assert.equal(res.json(), {
    request: { shelf: { name: "top", floor: 0 }, thing_id: "t-1", note: { text: "hi" }, loud: true, tags: ["a", "b"], count: 7 },
  });
  await app.close();
});

test("additional_bindings are served too, and 64-bit integers stay exact", async () => {
  const app = await gateway();
  const small = await app.inject({ method: "GET", url: "/v1/things/x?count=42" });
  assert.is(small.json().request.count, 42);
  const big = await app.inject({ method: "GET", url: "/v1/things/x?count=9007199254740993" });
  assert.is(big.json().request.count, "9007199254740993");
  const unknown = await app.inject({ method: "GET", url: "/v1/things/x?nope=1" });
  assert.is(unknown.statusCode, 400);
  assert.is(unknown.json().code, "INVALID_ARGUMENT");
  await app.close();
});

test("no body is no body, whatever Content-Type says: a body rule reads the empty message", async () => {
  const app = await gateway();
  for (const headers of [{ "content-type": "application/json", "content-length": "0" }, { "content-type": "application/json" }]) {
    for (const [method, url] of [
      ["PUT", "/v1/shelves/s1/shapes/p1"],
      ["POST", "/v1/shelves/top/things/t-1"],
    ] as const) {
      const res = await app.inject({ method, url, headers, payload: "" });
      assert.is(res.statusCode, 200, `${method} ${url}: ${res.body}`);
      // A byte order mark, and whitespace, are no body either.
      const bom = await app.inject({ method, url, headers: { "content-type": "application/json" }, payload: Buffer.from([0xef, 0xbb, 0xbf, 0x20]) });
      assert.is(bom.statusCode, 200, `${method} ${url} with a BOM: ${bom.body}`);
    }
  }
  await app.close();
});

test("the query, path and body do not contradict each other: a field is given once, by one of them, in the form proto3 JSON takes", async () => {
  const app = await gateway();
  const refused = async (method: "GET" | "POST" | "PUT" | "DELETE", url: string, payload?: object) => {
    const res = await app.inject({ method, url, ...(payload === undefined ? {} : { payload }) });
    assert.is(res.statusCode, 400, `${method} ${url}: ${res.body}`);
    return res.json() as { error: string; code: string };
  };
  // A scalar given twice, or under both its names.
  assert.match((await refused("GET", "/v1/things/x?count=1&count=2")).error, /^Invalid count: is given 2 times; give it once$/);
  assert.match((await refused("GET", "/v1/things/x?loud=true&loud=false")).error, /is given 2 times/);
  // A field the path sets.
  assert.match((await refused("GET", "/v1/things/x?thing_id=y")).error, /^Invalid thing_id: is set by the path; leave it out of the query$/);
  assert.match((await refused("GET", "/v1/things/x?thingId=y")).error, /is set by the path/);
  // Integers as decimal digits only.
  for (const count of ["0x10", "1e1", "%2B3", "1.0", ""]) assert.match((await refused("GET", `/v1/things/x?count=${count}`)).error, /must be a whole number in decimal digits/);
  // A path field repeated in a body "*" must agree with the path.
  const agreed = await app.inject({ method: "PUT", url: "/v1/shelves/s1/shapes/p1", payload: { shelf_id: "s1", shape: { id: "p1" } } });
  assert.is(agreed.statusCode, 200, agreed.body);
  assert.match((await refused("PUT", "/v1/shelves/s1/shapes/p1", { shelf_id: "other" })).error, /^Invalid shelf_id: is set by the path \("s1"\); leave it out of the body$/);
  // null, and "" for a field without presence, are proto3 JSON's "not set": no contradiction.
  for (const payload of [{ shelf_id: null }, { shelfId: null }, { shelf_id: "" }, { shelfId: "" }]) {
    const unset = await app.inject({ method: "PUT", url: "/v1/shelves/s1/shapes/p1", payload: { ...payload, shape: { id: "p1" } } });
    assert.is(unset.statusCode, 200, `${JSON.stringify(payload)}: ${unset.body}`);
  }
  // Under either spelling, also when the other one agrees.
  assert.match((await refused("PUT", "/v1/shelves/s1/shapes/p1", { shelfId: "other" })).error, /^Invalid shelf_id: is set by the path/);
  assert.match((await refused("PUT", "/v1/shelves/s1/shapes/p1", { shelf_id: "s1", shelfId: "other" })).error, /^Invalid shelf_id: is set by the path/);
  assert.match((await refused("PUT", "/v1/shelves/s1/shapes/p1", { shelfId: "s1", shelf_id: "other" })).error, /^Invalid shelf_id: is set by the path/);
  assert.match((await refused("PUT", "/v1/shelves/s1/shapes/p1", { shelf_id: "s1", shape: { id: "other" } })).error, /^Invalid shape\.id: is set by the path \("p1"\)/);
  assert.is((await app.inject({ method: "GET", url: "/v1/things/x?tags=a&tags=b" })).statusCode, 200, "a repeated field may repeat");
  // A body field's part in the query would override the body.
  assert.match((await refused("POST", "/v1/shelves/top/things/t-1?note.text=from-query", { text: "from-body" })).error, /^Invalid note\.text: is part of the body \(note\); give it there/);
  // The gateway's own JSON parser keeps Fastify's checks.
  const poisoned = await app.inject({ method: "PUT", url: "/v1/shelves/s1/shapes/p1", headers: { "content-type": "application/json" }, payload: '{"__proto__":{"x":1}}' });
  // Rendered 400 by the server's error handler (test/contract/protocols.ts); this app has Fastify's own.
  assert.match(poisoned.json().message, /the body has a "__proto__" key/, "Fastify's prototype-poisoning check still runs");
  await app.close();
});

test("query parameters are read as grpc-gateway reads them: booleans as strconv.ParseBool, enums by name or number, one-string well-known types", async () => {
  const app = await gateway();
  const query = [
    "loud=T",
    "extras.colour=COLOUR_RED",
    "extras.colours=2",
    "extras.colours=COLOUR_RED",
    "extras.at=2026-01-02T03:04:05Z",
    "extras.wait=1.5s",
    "extras.mask=thing_id,shelf.name,noteText",
    "extras.big=12345678901234567",
    "extras.maybe=0",
  ].join("&");
  const res = await app.inject({ method: "GET", url: `/v1/things/x?${query}` });
  assert.is(res.statusCode, 200, res.body);
  const { request } = res.json();
  assert.is(request.loud, true);
  assert.equal(request.extras, {
    colour: "COLOUR_RED",
    colours: ["COLOUR_BLUE", "COLOUR_RED"],
    at: "2026-01-02T03:04:05Z",
    wait: "1.500s",
    mask: "thingId,shelf.name,noteText",
    big: "12345678901234567",
    maybe: false,
  });
  for (const [spelling, value] of [["1", true], ["t", true], ["TRUE", true], ["True", true], ["0", false], ["f", false], ["F", false], ["FALSE", false], ["False", false]] as const) {
    const one = await app.inject({ method: "GET", url: `/v1/things/x?loud=${spelling}` });
    assert.is(one.json().request.loud, value, spelling);
  }
  const refused = async (q: string, problem: RegExp) => {
    const r = await app.inject({ method: "GET", url: `/v1/things/x?${q}` });
    assert.is(r.statusCode, 400, `${q}: ${r.body}`);
    assert.match(r.json().error, problem, q);
  };
  await refused("loud=yes", /^Invalid loud: must be true or false \(or 1 or 0\), got "yes"$/);
  await refused("extras.maybe=2", /^Invalid extras\.maybe: must be true or false/);
  await refused("extras.colour=PURPLE", /^Invalid extras\.colour: must be one of COLOUR_UNSPECIFIED, COLOUR_RED, COLOUR_BLUE \(or its number\), got "PURPLE"$/);
  await refused("extras.colours=7", /^Invalid extras\.colours: must be one of/);
  await refused("extras.big=1e3", /^Invalid extras\.big: must be a whole number in decimal digits/);
  await refused("shelf.floor=99999999999999999999", /^Invalid shelf\.floor: must be a whole number from -2147483648 to 2147483647, got 99999999999999999999$/);
  await refused("extras.at=yesterday", /^Invalid extras\.at: must be an RFC 3339 time such as 2024-01-02T03:04:05Z, got "yesterday"$/);
  await refused("extras.wait=5m", /^Invalid extras\.wait: must be seconds followed by "s", such as 1\.5s, got "5m"$/);
  // A well-known type's own fields are not parameters: its JSON is not its fields.
  await refused("extras.at.seconds=1", /^Invalid extras\.at\.seconds: no such query parameter/);
  await app.close();
});

test("a nested path variable sets that field alone: its siblings are still the query's; an empty variable is a stray slash", async () => {
  const app = await gateway();
  const res = await app.inject({ method: "POST", url: "/v1/shelves/top/things/t-1?shelf.floor=3", payload: { text: "hi" } });
  assert.is(res.statusCode, 200, res.body);
  assert.equal(res.json().request.shelf, { name: "top", floor: 3 });
  const bound = await app.inject({ method: "POST", url: "/v1/shelves/top/things/t-1?shelf.name=other", payload: { text: "hi" } });
  assert.equal([bound.statusCode, bound.json().error], [400, "Invalid shelf.name: is set by the path; leave it out of the query"]);
  // A trailing slash where a variable goes says so, rather than that the field is missing.
  const slash = await app.inject({ method: "GET", url: "/v1/things/" });
  assert.equal([slash.statusCode, slash.json().error], [400, 'Invalid thing_id: is empty in the path: name one after its "/", or leave that "/" out']);
  await app.close();
});

test("no body is no body whatever type it is labelled; a body of another type than JSON is refused unread", async () => {
  const app = await gateway();
  const empty = await app.inject({ method: "POST", url: "/v1/shelves/top/things/t-1", headers: { "content-type": "text/plain", "content-length": "0" } });
  assert.is(empty.statusCode, 200, empty.body);
  assert.equal(empty.json().request.thing_id, "t-1");
  const text = await app.inject({ method: "POST", url: "/v1/shelves/top/things/t-1", headers: { "content-type": "text/plain" }, payload: "hello" });
  // Rendered 415 by the server's error handler (test/contract/protocols.ts); this app has Fastify's own.
  assert.match(text.json().message, /Content-Type text\/plain is not supported/);
  await app.close();
});

test("64-bit integers are JSON numbers at any depth, through recursive messages and maps too", async () => {
  const putShapeResponse = registry.getMessage("fixture.v1.PutShapeResponse") as DescMessage;
  const app = Fastify();
  registerRestGateway(app, {
    services: [fixture],
    call: async () => ({
      message: create(putShapeResponse, {
        shape: { weight: 3n, sizes: { a: 1n }, parent: { weight: 5n, sizes: { b: 6n }, parent: { weight: 9n } }, children: { 1: { weight: 7n } } },
      } as never) as Message,
      header: new Headers(),
      trailer: new Headers(),
    }),
    callStream: noStreams,
    contextValues: () => createContextValues(),
    outcome: () => ({}),
    refused: () => false,
    toError: (error) => ConnectError.from(error),
  });
  const res = await app.inject({ method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {} });
  assert.is(res.statusCode, 200, res.body);
  const shape = res.json();
  assert.equal([shape.weight, shape.sizes.a, shape.parent.weight, shape.parent.sizes.b, shape.parent.parent.weight, shape.children["1"].weight], [3, 1, 5, 6, 9, 7]);
  await app.close();
});

/** The fixture's stream served by the gateway: each call plays `script` (a message, a wait, or an error). */
async function streamingGateway(script: (input: Message) => AsyncIterable<Message>, service: DescService = fixture) {
  const app = Fastify();
  registerRestGateway(app, {
    services: [service],
    call: async () => {
      throw new Error("no unary call in this test");
    },
    callStream: async (method, input) => {
      assert.is(method.name, "WatchShapes");
      return { header: new Headers({ "x-stream": "1" }), messages: script(input) };
    },
    contextValues: () => createContextValues(),
    outcome: () => ({}),
    refused: () => false,
    toError: (error) => ConnectError.from(error),
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

/** The promise's value, or a failure naming what did not come within 2 s. */
function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not come within 2 s`)), 2_000)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const shape = (id: string) => create(watchResponse, { shape: { id } } as never) as Message;

test("a server-streaming RPC answers newline-delimited JSON, one {result} line per message, each written as it comes", async () => {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const { app, url } = await streamingGateway(async function* (input) {
    assert.equal((input as unknown as { shelfId: string; limit: number }).limit, 2);
    yield shape("a");
    await released;
    yield shape("b");
  });
  try {
    // The first line arrives while the stream still waits to send its second.
    const res = await within(fetch(`${url}/v1/shelves/top/shapes?limit=2`), "the answer's headers");
    assert.is(res.status, 200);
    assert.is(res.headers.get("content-type"), "application/x-ndjson");
    assert.is(res.headers.get("x-stream"), "1");
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const first = decoder.decode((await within(reader.read(), "the first line")).value);
    assert.ok(first.endsWith("\n") && first.indexOf("\n") === first.length - 1, first);
    const line = JSON.parse(first);
    assert.equal(Object.keys(line), ["result"]);
    assert.is(line.result.id, "a");
    release();
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += decoder.decode(r.value);
    assert.equal(rest, `${JSON.stringify({ result: { ...line.result, id: "b" } })}\n`);
  } finally {
    release();
    await app.close();
  }
});

test("a stream's error before its first message is an ordinary error answer; after it, a last {error} line", async () => {
  const early = await streamingGateway(async function* () {
    throw apiError("ENTITY_NOT_FOUND", { entityId: "e" });
  });
  try {
    const res = await fetch(`${early.url}/v1/shelves/top/shapes`);
    assert.is(res.status, 404);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    assert.is(((await res.json()) as { code: string }).code, "ENTITY_NOT_FOUND");
  } finally {
    await early.app.close();
  }
  const late = await streamingGateway(async function* () {
    yield shape("a");
    throw apiError("SHUTTING_DOWN", { lastEventId: "7" });
  });
  try {
    const res = await fetch(`${late.url}/v1/shelves/top/shapes`);
    assert.is(res.status, 200);
    const lines = (await res.text()).split("\n");
    assert.is(lines.length, 3);
    assert.is(JSON.parse(lines[0]!).result.id, "a");
    const { error } = JSON.parse(lines[1]!);
    assert.equal([error.code, Object.keys(error).sort()], ["SHUTTING_DOWN", ["code", "error"]]);
    assert.match(error.error, "after_event_id=7");
    assert.is(lines[2], "");
  } finally {
    await late.app.close();
  }
});

test("a client that goes away ends the stream: the handler's iteration is returned", async () => {
  let ended!: () => void;
  const returned = new Promise<void>((resolve) => (ended = resolve));
  const { app, url } = await streamingGateway(async function* () {
    try {
      for (let i = 0; ; i++) {
        yield shape(String(i));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      ended();
    }
  });
  try {
    // node:http, whose destroy() closes the connection (fetch's abort may leave one open).
    const req = httpGet(`${url}/v1/shelves/top/shapes`, (res) => res.once("data", () => req.destroy()));
    req.on("error", () => undefined);
    await Promise.race([returned, new Promise((_, reject) => setTimeout(() => reject(new Error("the stream was not ended")), 2_000))]);
  } finally {
    await app.close();
  }
});

test("a custom method's :verb is served after a literal segment or a variable, which then ends where the last :verb begins", async () => {
  const routes = restBindings([EntityEventsService], http).map((b) => `${b.method.name} ${b.verb} ${b.routePath}`);
  assert.equal(routes, ["ListEvents GET /api/entities/:p0/events", "WatchEvents GET /api/entities/:p0/events::watch"]);
  assert.not.ok(
    restBindings([fixture], http).some((b) => b.method.name === "UploadShapes"),
    "a client stream has no REST form",
  );
  const set = clone(FileDescriptorSetSchema, fromBinary(FileDescriptorSetSchema, image));
  const watch = set.file.find((f) => f.name === "fixture/v1/fixture.proto")!.service[0]!.method.find((m) => m.name === "WatchShapes")!;
  setExtension(watch.options!, http, create(HttpRuleSchema, { pattern: { case: "get", value: "/v1/shelves/{shelf_id}:watch" } }));
  const changed = createFileRegistry(set).getService("fixture.v1.FixtureService") as DescService;
  assert.ok(restBindings([changed], http).some((b) => b.method.name === "WatchShapes" && b.routePath === "/v1/shelves/:p0(^.+)::watch"));
  const { app, url } = await streamingGateway(async function* (input) {
    yield shape((input as unknown as { shelfId: string }).shelfId);
  }, changed);
  try {
    for (const [path, shelf] of [["top:watch", "top"], ["a:b:watch", "a:b"]] as const) {
      const res = await fetch(`${url}/v1/shelves/${path}`);
      assert.is(res.status, 200, path);
      assert.is(JSON.parse((await res.text()).trim()).result.shape.id, shelf, path);
    }
    // Without the verb it is another route, which this service does not have.
    assert.is((await fetch(`${url}/v1/shelves/top`)).status, 404);
  } finally {
    await app.close();
  }
  // A verb route beside another method's plain variable route: neither is the other's literal resource.
  const echo = set.file.find((f) => f.name === "fixture/v1/fixture.proto")!.service[0]!.method.find((m) => m.name === "Echo")!;
  setExtension(
    echo.options!,
    http,
    create(HttpRuleSchema, { pattern: { case: "post", value: "/v1/things/{thing_id}:undelete" }, body: "note", additionalBindings: [{ pattern: { case: "get", value: "/v1/things/{thing_id}" } }, { pattern: { case: "get", value: "/v1/things/special" } }] }),
  );
  const verbs = createFileRegistry(set).getService("fixture.v1.FixtureService") as DescService;
  const app2 = Fastify();
  registerRestGateway(app2, {
    services: [verbs],
    call: async (_method, input) => ({ message: create(echoResponse, { request: input } as never) as Message, header: new Headers(), trailer: new Headers() }),
    callStream: noStreams,
    contextValues: () => createContextValues(),
    outcome: () => ({}),
    refused: () => false,
    toError: (error) => ConnectError.from(error),
  });
  const served = await app2.inject({ method: "GET", url: "/v1/things/x:undelete" });
  assert.equal([served.statusCode, served.json().request?.thing_id], [200, "x:undelete"], served.body);
  const verb = await app2.inject({ method: "POST", url: "/v1/things/x:undelete", payload: { text: "t" } });
  assert.equal([verb.statusCode, verb.json().request?.thing_id], [200, "x"], verb.body);
  // The verb's variable takes only segments ending in the verb: a literal without it is not shadowed, so it has no 405 route of the verb's method.
  assert.not.ok(app2.hasRoute({ method: "POST", url: "/v1/things/special" }), "no stand-in POST route on a literal the verb route cannot take");
  const literal = await app2.inject({ method: "POST", url: "/v1/things/special:undelete", payload: { text: "t" } });
  assert.equal([literal.statusCode, literal.json().request?.thing_id], [200, "special"], literal.body);
  await app2.close();
});

test.run();

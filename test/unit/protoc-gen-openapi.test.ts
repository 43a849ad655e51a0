// The OpenAPI generator (tools/protoc-gen-openapi), run by buf as CI runs
// it, on a fixture proto with every rule shape and field kind; then the
// REST gateway serves that fixture and its answers are held to the
// document the generator wrote for it.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  clone,
  create,
  createFileRegistry,
  createRegistry,
  type DescExtension,
  type DescMessage,
  type DescMethod,
  type DescService,
  fromBinary,
  type Message,
  setExtension,
} from "@bufbuild/protobuf";
import { CodeGeneratorRequestSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import Fastify from "fastify";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { file_entityversions_v1_entity_access } from "../../gen/entityversions/v1/entity_access_pb.js";
import { file_entityversions_v1_entity_events } from "../../gen/entityversions/v1/entity_events_pb.js";
import { file_entityversions_v1_entity_versions } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { apiError, detail } from "../../src/errors/api-error.js";
import { writeRestJson } from "../../src/rest/json-codec.js";
import { registerRestGateway } from "../../src/rest/rest-gateway.js";
import { successStatus } from "../../src/rest/success-status.js";
import { protocGenOpenapi } from "../../tools/protoc-gen-openapi/src/plugin.js";
import { apiDocument, OpenApiDocument } from "../support/openapi.js";

type Json = { [key: string]: any };

const fixtureProto = "test/fixtures/proto/fixture/v1/fixture.proto";
const out = fs.mkdtempSync(path.join(os.tmpdir(), "ev-openapi-fixture-"));
execFileSync("node_modules/.bin/buf", [
  "generate",
  "--template",
  JSON.stringify({
    version: "v2",
    plugins: [{ local: "tools/protoc-gen-openapi/bin/protoc-gen-openapi.js", out, strategy: "all", opt: ["file=fixture", "title=Fixture", "version=test"] }],
  }),
  "--path",
  fixtureProto,
]);
const doc = JSON.parse(fs.readFileSync(path.join(out, "fixture.json"), "utf8")) as Json;
fs.rmSync(out, { recursive: true, force: true });

const image = fromBinary(FileDescriptorSetSchema, execFileSync("node_modules/.bin/buf", ["build", "--path", fixtureProto, "-o", "-"]));
const registry = createFileRegistry(image);
const fixture = registry.getService("fixture.v1.FixtureService") as DescService;
const message = (name: string) => registry.getMessage(`fixture.v1.${name}`) as DescMessage;
const op = (p: string, verb: string) => doc.paths[p]?.[verb] as Json;
const schema = (name: string) => doc.components.schemas[name] as Json;
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

test("every RPC with a rule that REST can carry is an operation, named after the RPC, with its comment", () => {
  const operations = Object.entries(doc.paths as Record<string, Json>).flatMap(([p, verbs]) => Object.entries(verbs).map(([v, o]) => `${v.toUpperCase()} ${p} ${(o as Json).operationId}`));
  assert.equal(operations, [
    "POST /v1/shelves/{shelf.name}/things/{thing_id} Echo",
    "GET /v1/things/{thing_id} Echo_2",
    "PUT /v1/shelves/{shelf_id}/shapes/{shape.id} PutShape",
    "GET /v1/shelves/{shelf_id}/shapes WatchShapes",
  ]);
  assert.is(op("/v1/shelves/{shelf_id}/shapes/{shape.id}", "put").summary, "PutShape stores a shape: the whole request is the body, and the shape alone is the answer.");
  assert.equal(doc.tags, [{ name: "FixtureService", description: "FixtureService exists only for the REST gateway's and the OpenAPI\ngenerator's tests: rule shapes and field kinds the real service does not\nuse, served and described with no code of their own." }]);
});

test("path variables, nested ones by dotted name; query parameters for the fields path and body leave", () => {
  const echo = op("/v1/shelves/{shelf.name}/things/{thing_id}", "post");
  assert.equal(echo.parameters.map((p: Json) => `${p.in} ${p.name} ${JSON.stringify(p.schema)}`), [
    'path shelf.name {"type":"string"}',
    'path thing_id {"type":"string"}',
    'query shelf.floor {"type":"integer","format":"int32"}',
    'query loud {"type":"boolean"}',
    'query tags {"type":"array","items":{"type":"string"}}',
    'query count {"type":"integer","format":"int64"}',
    'query extras.colour {"type":"string","enum":["COLOUR_UNSPECIFIED","COLOUR_RED","COLOUR_BLUE"]}',
    'query extras.colours {"type":"array","items":{"type":"string","enum":["COLOUR_UNSPECIFIED","COLOUR_RED","COLOUR_BLUE"]}}',
    'query extras.at {"type":"string","format":"date-time"}',
    'query extras.wait {"type":"string","pattern":"^-?[0-9]+(\\\\.[0-9]{1,9})?s$","examples":["1.500s"]}',
    'query extras.mask {"type":"string","description":"Comma-separated field paths, by name (field_name) or JSON name (fieldName)."}',
    'query extras.big {"type":"integer","format":"int64"}',
    'query extras.maybe {"type":"boolean"}',
  ]);
  const extras = ["colour", "colours", "at", "wait", "mask", "big", "maybe"].map((f) => `extras.${f}`);
  // The body field is the body: no note.text in the query; the other binding has no body.
  assert.equal(echo.requestBody.content["application/json"].schema, { ...ref("fixture.v1.Note-input"), description: "A note, from the body." });
  assert.equal(op("/v1/things/{thing_id}", "get").parameters.map((p: Json) => p.name), ["thing_id", "shelf.name", "shelf.floor", "note.text", "loud", "tags", "count", ...extras]);
  // Enums and one-string well-known types are parameters, not their own fields; a recursive message is walked once.
  assert.equal(op("/v1/shelves/{shelf_id}/shapes", "get").parameters.map((p: Json) => p.name), ["shelf_id", "limit", "kinds", "colour", "filter.min_size", "since", "deep"]);
});

test("a query parameter is required when its field is REQUIRED and so is every message above it", () => {
  const watch = op("/v1/shelves/{shelf_id}/shapes", "get");
  const required = watch.parameters.filter((p: Json) => p.required === true).map((p: Json) => `${p.in} ${p.name}`);
  // filter.min_size is REQUIRED, but only once a filter is given: the parameter itself is optional.
  assert.equal(required, ["path shelf_id", "query limit"]);
});

test('body "*" is the request without its path fields; response_body is the field\'s message; created_when gives 201 and 200', () => {
  const put = op("/v1/shelves/{shelf_id}/shapes/{shape.id}", "put");
  assert.equal(put.parameters.map((p: Json) => p.name), ["shelf_id", "shape.id"]);
  assert.equal(put.requestBody.content["application/json"].schema, ref("fixture.v1.PutShapeRequest-body"));
  assert.equal(Object.keys(schema("fixture.v1.PutShapeRequest-body").properties), ["shape", "create_only"]);
  assert.is(schema("fixture.v1.PutShapeRequest-body").required, undefined, "the JSON reader requires nothing");
  assert.equal(put.responses["201"].content["application/json"].schema, ref("fixture.v1.Shape"));
  assert.equal(put.responses["200"].content["application/json"].schema, ref("fixture.v1.Shape"));
  assert.equal(put.security, [{ bearer: [] }]);
});

test("a server stream is NDJSON lines of results or a last error; client streams and RPCs without a rule are left out", () => {
  const watch = op("/v1/shelves/{shelf_id}/shapes", "get");
  const media = watch.responses["200"].content["application/x-ndjson"];
  // The body as a whole is text; each line's schema is the item schema (OpenAPI 3.2's itemSchema).
  assert.is(media.schema.type, "string");
  const line = media["x-item-schema"];
  assert.equal(line.oneOf[0].properties.result, ref("fixture.v1.Shape"));
  assert.equal(line.oneOf[1].required, ["error"]);
  assert.ok(watch.responses["401"] !== undefined, "errors before the first message are ordinary answers");
  const all = JSON.stringify(doc.paths);
  assert.not.match(all, /UploadShapes|Forget|shapes:upload/);
});

test("answers: implicit fields required, enums by name, maps, oneofs, 64-bit integers, well-known types", () => {
  const shape = schema("fixture.v1.Shape");
  assert.equal(shape.required, ["id", "colour", "palette", "sizes", "children", "blob", "weight", "ratio", "small"]);
  const p = shape.properties as Record<string, Json>;
  assert.equal(schema("fixture.v1.Colour").enum, ["COLOUR_UNSPECIFIED", "COLOUR_RED", "COLOUR_BLUE"]);
  assert.is(p["colour"]!.$ref, "#/components/schemas/fixture.v1.Colour");
  assert.equal(p["palette"]!.items, ref("fixture.v1.Colour"));
  assert.equal(p["sizes"]!.additionalProperties.oneOf.map((s: Json) => s.type), ["integer", "string"]);
  assert.equal(p["children"]!.propertyNames, { pattern: "^-?[0-9]+$" });
  assert.equal(p["children"]!.additionalProperties, ref("fixture.v1.Shape"));
  assert.match(p["radius"]!.description, /At most one of `radius`, `polygon` is set/);
  assert.equal(p["weight"]!.oneOf[0].minimum, 0);
  assert.equal(p["ratio"]!.oneOf[1].enum, ["NaN", "Infinity", "-Infinity"]);
  assert.is(p["made_at"]!.format, "date-time");
  assert.match(p["ttl"]!.pattern, /s\$$/);
  assert.is(p["attributes"]!.type, "object");
  assert.is(p["attributes"]!.additionalProperties, true, "a Struct takes any members, and says so");
  assert.is(p["anything"]!.type, undefined);
  assert.is(p["big_wrapped"]!.type, "string", "Int64Value keeps proto3 JSON's string");
  assert.is(p["note"]!.type, "string");
  assert.is(p["blob"]!.format, "byte");
  assert.is(p["mask"]!.type, "string");
  assert.is(p["list"]!.type, "array");
  assert.is(schema("fixture.v1.Shape-input").required, undefined);
  // A request's 64-bit integer: a JSON number only as far as it is read exactly (the service refuses more), a string for any value.
  const sent = (schema("fixture.v1.Shape-input").properties as Record<string, Json>)["weight"]!.oneOf;
  assert.equal([sent[0].minimum, sent[0].maximum], [0, Number.MAX_SAFE_INTEGER]);
  assert.ok(new RegExp(sent[1].pattern).test("00000000000000000000000000018446744073709551615") && !new RegExp(sent[1].pattern).test("1".repeat(21)));
});

test("errors: each status lists its codes; a code with a detail has the detail's fields, null when unset", () => {
  const put = op("/v1/shelves/{shelf_id}/shapes/{shape.id}", "put");
  assert.equal(Object.keys(put.responses), ["200", "201", "400", "401", "408", "409", "413", "415", "429", "431", "500", "503", "504"]);
  assert.equal(put.responses["409"].content["application/json"].schema.oneOf, [
    { allOf: [ref("Error"), { type: "object", properties: { code: { enum: ["STALE_BASE"] } } }] },
    ref("Error.VERSION_ALREADY_EXISTS"),
  ]);
  const detailError = schema("Error.VERSION_ALREADY_EXISTS");
  assert.equal(detailError.required, ["error", "code", "existing", "count"]);
  assert.equal(detailError.properties.existing.anyOf, [ref("fixture.v1.Shape-detail"), { enum: [null] }], "null as a one-value enum, which OpenAPI 3.0 loaders read");
  assert.is(detailError.properties.count.anyOf[0].type, "string", "details are proto3 JSON: 64-bit integers are strings");
  assert.is(put.responses["503"].headers["Retry-After"].required, true);
  assert.is(put.responses["401"].headers["WWW-Authenticate"].required, true);
  assert.match(put.responses["409"].description, /- `STALE_BASE`: .*Base version "\{baseVersionId\}"/);
});

/** The components that successful answers reach: the messages in the form the gateway writes answers in. */
function answerComponents(document: Json): Set<string> {
  const reached = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (typeof node === "object" && node !== null) {
      const target = (node as Json)["$ref"];
      if (typeof target === "string") {
        const name = target.slice("#/components/schemas/".length);
        if (!reached.has(name)) {
          reached.add(name);
          walk(document.components.schemas[name]);
        }
      }
      Object.values(node).forEach(walk);
    }
  };
  for (const verbs of Object.values(document.paths as Record<string, Json>)) {
    for (const operation of Object.values(verbs)) for (const [status, r] of Object.entries((operation as Json).responses)) if (status < "300") walk(r);
  }
  return reached;
}

test("a code's message is the one the operation answers: where to resume only on a stream's", () => {
  const paths = apiDocument().document.paths;
  const confirm = paths["/api/entities/{entity_id}/versions/confirm"].post.responses;
  const watch = paths["/api/entities/{entity_id}/events:watch"].get.responses;
  for (const status of ["401", "503", "504"]) {
    assert.not.match(confirm[status].description, "after_event_id", `ConfirmUpload ${status}`);
    assert.match(watch[status].description, "after_event_id={lastEventId}", `WatchEvents ${status}`);
  }
  assert.match(confirm["504"].description, "retrying a push or a confirm is safe");
});

test("what the document calls required is exactly what the gateway writes for an empty message, in both documents", () => {
  const real = createRegistry(file_entityversions_v1_entity_versions, file_entityversions_v1_entity_access, file_entityversions_v1_entity_events);
  const checked: string[] = [];
  for (const [document, find] of [
    [doc, (n: string) => registry.getMessage(n)],
    [apiDocument().document, (n: string) => real.getMessage(n)],
  ] as const) {
    for (const name of answerComponents(document)) {
      const desc = find(name);
      if (desc === undefined) continue; // an enum
      const written = Object.keys(writeRestJson(desc, create(desc))).sort();
      assert.equal(written, [...(document.components.schemas[name].required ?? [])].sort(), name);
      checked.push(name);
    }
  }
  assert.ok(
    ["fixture.v1.Shape", "entityversions.v1.Version", "entityversions.v1.EntityAccess", "entityversions.v1.Event", "entityversions.v1.WatchEventsResponse"].every((n) =>
      checked.includes(n),
    ),
    checked.join(),
  );
});

/** The fixture served by the real gateway: each RPC answers what its handler here makes. */
async function gateway(handlers: Record<string, (input: Message) => Message>) {
  const app = Fastify();
  registerRestGateway(app, {
    services: [fixture],
    call: async (method: DescMethod, input: Message) => ({ message: handlers[method.name]!(input), header: new Headers(), trailer: new Headers() }),
    callStream: async () => {
      throw new Error("no stream is called in this test");
    },
    contextValues: () => createContextValues(),
    outcome: () => ({}),
    refused: () => false,
    successStatus,
    toError: (error) => ConnectError.from(error),
  });
  await app.ready();
  return app;
}

test("the fixture gateway's answers, successes and errors, match the fixture's document", async () => {
  const fixtureDoc = new OpenApiDocument(doc);
  const huge = 2n ** 60n + 1n;
  const rich = {
    id: "s1",
    colour: 2,
    palette: [1, 2],
    sizes: { small: 3n, huge },
    children: { 7: { id: "c", weight: huge, parent: { id: "p", sizes: { x: huge } } } },
    outline: { case: "polygon", value: { xs: [-1n, huge] } },
    label: "l",
    madeAt: { seconds: 1_700_000_000n, nanos: 5_000_000 },
    ttl: { seconds: 3n, nanos: 500_000_000 },
    attributes: { fields: { a: { kind: { case: "numberValue", value: 1 } } } },
    anything: { kind: { case: "stringValue", value: "v" } },
    bigWrapped: 5n,
    note: "n",
    blob: new Uint8Array([1, 2, 3]),
    weight: huge,
    ratio: Number.NaN,
    parent: { id: "root", weight: 9n },
    mask: { paths: ["a.b", "c"] },
    list: { values: [{ kind: { case: "boolValue", value: true } }] },
    nothing: {},
    small: 4,
  };
  let next: () => Message = () => create(message("PutShapeResponse"));
  const app = await gateway({
    Echo: (input) => create(message("EchoResponse"), { request: input } as never),
    PutShape: () => next(),
  });
  const answers: Array<{ method: string; url: string; payload?: unknown; expect: number }> = [
    { method: "POST", url: "/v1/shelves/top/things/t-1?loud=true&tags=a&tags=b&count=7", payload: { text: "hi" }, expect: 200 },
    { method: "GET", url: "/v1/things/x?count=9007199254740993&shelf.name=s&note.text=t", expect: 200 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 201 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 200 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 200 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 409 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 409 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 409 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: {}, expect: 503 },
    { method: "PUT", url: "/v1/shelves/s/shapes/x", payload: { nope: 1 }, expect: 400 },
  ];
  const answerQueue: Array<() => Message> = [
    () => create(message("PutShapeResponse"), { shape: rich, created: true } as never),
    () => create(message("PutShapeResponse"), { shape: { id: "plain" }, created: false } as never),
    () => create(message("PutShapeResponse")), // no shape: the gateway writes an empty one
    () => {
      throw apiError("VERSION_ALREADY_EXISTS", { entityId: "e", version: "v", versionId: "i" }, { details: [detail(message("ShelfConflict"), { existing: rich, count: huge } as never)] });
    },
    () => {
      throw apiError("VERSION_ALREADY_EXISTS", { entityId: "e", version: "v", versionId: "i" }, { details: [detail(message("ShelfConflict"), {} as never)] });
    },
    () => {
      throw apiError("STALE_BASE", { baseVersionId: "b", tipVersionId: undefined });
    },
    () => {
      throw apiError("DATABASE_UNAVAILABLE", {});
    },
  ];
  const seen = new Set<string>();
  for (const a of answers) {
    if (a.method === "PUT" && a.expect !== 400) next = answerQueue.shift()!;
    const res = await app.inject({ method: a.method as "GET", url: a.url, ...(a.payload === undefined ? {} : { payload: a.payload as object }) });
    assert.is(res.statusCode, a.expect, `${a.method} ${a.url}: ${res.body}`);
    const headers = new Headers(Object.entries(res.headers).map(([k, v]) => [k, String(v)] as [string, string]));
    assert.equal(fixtureDoc.problems({ method: a.method, path: a.url, status: res.statusCode, headers, body: res.json() }, seen), []);
  }
  // Big integers really came as strings, small ones as numbers, and the document took both.
  assert.ok([...seen].includes("PutShape 409 VERSION_ALREADY_EXISTS") && [...seen].includes("Echo_2 200 "), [...seen].join());
  await app.close();
});

test("a reason the catalog does not have stops generation with a message naming it", () => {
  const bad = clone(FileDescriptorSetSchema, image);
  const file = bad.file.find((f) => f.name === "fixture/v1/fixture.proto")!;
  const method = file.service[0]!.method.find((m) => m.name === "PutShape")!;
  const errorsOption = registry.getExtension("entityversions.v1.errors") as DescExtension;
  setExtension(method.options!, errorsOption, create(errorsOption.message!, { reasons: ["NO_SUCH_REASON"] }) as never);
  const request = create(CodeGeneratorRequestSchema, { fileToGenerate: [file.name], protoFile: bad.file, parameter: "file=x" });
  assert.throws(() => protocGenOpenapi.run(request), /FixtureService\.PutShape: "NO_SUCH_REASON" is not an error reason of src\/errors\/catalog\.ts/);
  assert.throws(() => protocGenOpenapi.run(create(CodeGeneratorRequestSchema, { ...request, parameter: "colour=blue" })), /unknown option "colour"/);
});

test.run();

// The REST gateway is generic: routes come from google.api.http rules alone.
// A fixture service (test/fixtures/proto), built by buf at test time, is
// served with no route code; the real service's rules are the spec's paths.
import { execFileSync } from "node:child_process";
import { create, createFileRegistry, type DescMessage, type DescService, fromBinary, type Message } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import Fastify from "fastify";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { http } from "../../gen/google/api/annotations_pb.js";
import { EntityVersionsService } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { restBindings } from "../../src/rest/http-rules.js";
import { registerRestGateway } from "../../src/rest/rest-gateway.js";

const image = execFileSync("node_modules/.bin/buf", ["build", "--path", "test/fixtures/proto/fixture/v1/fixture.proto", "-o", "-"]);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, image));
const fixture = registry.getService("fixture.v1.FixtureService") as DescService;
const echoResponse = registry.getMessage("fixture.v1.EchoResponse") as DescMessage;

async function gateway() {
  const app = Fastify();
  registerRestGateway(app, {
    services: [fixture],
    call: async (_method, input) => ({
      message: create(echoResponse, { request: input } as never) as Message,
      header: new Headers({ "x-echo": "1" }),
      trailer: new Headers(),
    }),
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
    request: { shelf: { name: "top" }, thing_id: "t-1", note: { text: "hi" }, loud: true, tags: ["a", "b"], count: 7 },
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

test.run();

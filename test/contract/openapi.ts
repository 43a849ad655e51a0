import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import { getOption } from "@bufbuild/protobuf";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { parse as parseYaml } from "yaml";
import { EntityAccessService } from "../../gen/entityversions/v1/entity_access_pb.js";
import { EntityEventsService } from "../../gen/entityversions/v1/entity_events_pb.js";
import { EntityVersionsService } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { FieldBehavior, field_behavior } from "../../gen/google/api/field_behavior_pb.js";
import type { Authenticator } from "../../src/auth/caller.js";
import type { Backend } from "../support/env.js";
import { apiDocument, documentPath } from "../support/openapi.js";
import { answersSeen, newEntityId, newSourceHash, nextVersionString, startService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

type Json = { [key: string]: any };

/** Every operation of the document: method, path template, and whether Fastify reads a body for it. */
function operations(): Array<{ id: string; method: string; template: string; readsBody: boolean }> {
  return Object.entries(apiDocument().document.paths as Record<string, Record<string, Json>>).flatMap(([template, methods]) =>
    Object.entries(methods).map(([method, op]) => ({ id: op.operationId as string, method: method.toUpperCase(), template, readsBody: method !== "get" })),
  );
}

const pathValues: Record<string, string> = {
  entity_id: "ent-openapi",
  version_id: "00000000-0000-4000-8000-000000000000",
  user_id: "someone",
  org_id: "some-org",
};

function fill(template: string, values: Record<string, string> = {}): string {
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(values[name] ?? pathValues[name] ?? "x"));
}

/**
 * One REST request over a bare HTTP/1.1 connection, whose body may stall
 * (sent in part, never finished): what no fetch client can send. Its
 * answer is held to the document like every other.
 */
function rawRequest(url: string, backend: Backend, method: string, path: string, headers: Record<string, string>, body: string, stall: boolean) {
  return new Promise<{ status: number; code: string; headers: Headers; body: Json }>((resolve, reject) => {
    const req = http.request(new URL(path, url), { method, headers: { "content-type": "application/json", ...headers } }, (res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () => {
        const answer = { status: res.statusCode ?? 0, headers: new Headers(res.headers as Record<string, string>), body: JSON.parse(text) as Json };
        apiDocument().check({ method, path, ...answer }, answersSeen[backend]);
        resolve({ ...answer, code: answer.body["code"] as string });
      });
    });
    req.on("error", reject);
    req.flushHeaders();
    req.write(body);
    if (!stall) req.end();
  });
}

/** Sends one request per operation and returns the answers, by operation id. */
async function eachOperation(send: (op: ReturnType<typeof operations>[number]) => Promise<{ status: number; body: Json; headers: Headers }>) {
  const answers: Record<string, { status: number; code: string; headers: Headers }> = {};
  for (const op of operations()) {
    const res = await send(op);
    answers[op.id] = { status: res.status, code: res.body?.code, headers: res.headers };
  }
  return answers;
}

function expectEvery(answers: Record<string, { status: number; code: string }>, ids: string[], status: number, code: string) {
  const wrong = ids.filter((id) => answers[id]?.status !== status || answers[id]?.code !== code).map((id) => `${id}: ${answers[id]?.status} ${answers[id]?.code}`);
  assert.equal(wrong, [], `expected ${status} ${code}`);
}

/** A valid value of each field an RPC may ask for, with a fresh entity that has an upload under way. */
async function validSamples(svc: Parameters<typeof uploadOnly>[0]): Promise<Record<string, unknown>> {
  const e = newEntityId();
  const upload = await uploadOnly(svc, e);
  return {
    entity_id: e,
    version_id: "00000000-0000-4000-8000-000000000000",
    version: nextVersionString(),
    source_hash: newSourceHash(),
    storage_path: upload.res.body.storage_path,
    file_size_bytes: "1",
    user_id: "someone",
    org_id: "some-org",
  };
}

/**
 * The document is served, and every operation gives each error every
 * route can meet, shaped as documented: the service's clients hold every
 * answer to the document, so an undocumented status, code or field fails
 * the request.
 */
/** The fields a request body's schema requires, by their proto names: its `required`, and those it requires in either spelling (its `not`). */
function requiredOf(schema: Json): string[] {
  const not = schema["not"] as Json | undefined;
  const lacks = (not === undefined ? [] : ((not["anyOf"] as Json[] | undefined) ?? [not])) as Json[];
  return [...((schema["required"] ?? []) as string[]), ...lacks.map((lack) => ((lack["not"] as Json)["anyOf"] as Json[])[0]!["required"] as string[]).map((r) => r[0]!)];
}

export function openapiSuite(backend: Backend) {
  const s = serviceSuite("OpenAPI: the document is served, every operation's errors match it", backend, {
    MAX_REQUEST_BYTES: "1024",
    MAX_CONNECTION_BUFFERED_BYTES: "1024",
    MAX_BUFFERED_BYTES: "1500",
    REQUEST_BODY_TIMEOUT_MS: "500",
  });

  s("GET /openapi.json and /openapi.yaml serve the generated document, with no token", async ({ svc }) => {
    const anonymous = svc.restAs({});
    const json = await anonymous.get("/openapi.json");
    assert.is(json.status, 200);
    assert.match(json.headers.get("content-type") ?? "", /^application\/json/);
    assert.equal(json.body, JSON.parse(fs.readFileSync(documentPath, "utf8")));
    const yaml = await fetch(`${svc.url}/openapi.yaml`);
    assert.is(yaml.status, 200);
    assert.match(yaml.headers.get("content-type") ?? "", /^application\/yaml/);
    assert.equal(parseYaml(await yaml.text()), json.body);
    const page = await fetch(`${svc.url}/docs`);
    assert.is(page.status, 200);
    assert.match(page.headers.get("content-security-policy") ?? "", /default-src 'self'/);
    assert.match(await page.text(), /<script src="docs\/swagger-ui-bundle\.js">/);
    for (const asset of ["docs/swagger-ui-bundle.js", "docs/swagger-ui.css", "docs/init.js"]) {
      const res = await fetch(`${svc.url}/${asset}`);
      assert.is(res.status, 200, asset);
      assert.ok((await res.arrayBuffer()).byteLength > 100, asset);
    }
    assert.is((await fetch(`${svc.url}/docs/package.json`)).status, 404, "only the page's files are served");
    const slash = await fetch(`${svc.url}/docs/`, { redirect: "manual" });
    assert.is(slash.status, 301);
    assert.is(new URL(slash.headers.get("location")!, `${svc.url}/docs/`).href, `${svc.url}/docs`);
  });

  s("every operation: 401 without a token, 400 for a bad id or an unreadable URL, 431 past the header limit", async ({ svc }) => {
    const all = operations().map((o) => o.id);
    const anonymous = await eachOperation((op) => svc.restAs({}).request(op.method, fill(op.template), op.readsBody ? {} : undefined));
    expectEvery(anonymous, all, 401, "AUTH_REQUIRED");
    assert.ok(Object.values(anonymous).every((a) => /^Bearer/.test(a.headers.get("www-authenticate") ?? "")), "401s name the Bearer scheme");
    const badId = await eachOperation((op) => svc.rest.request(op.method, fill(op.template, { entity_id: "bad.id" }), op.readsBody ? {} : undefined));
    expectEvery(badId, all, 400, "INVALID_ARGUMENT");
    const badUrl = await eachOperation((op) => svc.rest.request(op.method, fill(op.template).replace("ent-openapi", "%E0%A4%A"), undefined));
    expectEvery(badUrl, all, 400, "MALFORMED_REQUEST");
    const bigHeaders = await eachOperation((op) => svc.rest.request(op.method, fill(op.template), op.readsBody ? {} : undefined, { "x-padding": "x".repeat(17_000) }));
    expectEvery(bigHeaders, all, 431, "REQUEST_HEADERS_TOO_LARGE");
  });

  s("every operation with a body: 400 for JSON that does not parse, 415 for other content or a compressed body, 413 past the limit", async ({ svc }) => {
    const withBody = operations().filter((o) => o.readsBody);
    assert.ok(withBody.length > 0);
    const ids = withBody.map((o) => o.id);
    const send = (headers: Record<string, string>, body: string) =>
      eachOperation((op) => (op.readsBody ? svc.rest.request(op.method, fill(op.template), body, headers) : Promise.resolve({ status: 0, body: {}, headers: new Headers() })));
    expectEvery(await send({}, '{"version": '), ids, 400, "MALFORMED_REQUEST");
    expectEvery(await send({ "content-type": "text/plain" }, "hello"), ids, 415, "UNSUPPORTED_MEDIA_TYPE");
    expectEvery(await send({ "content-encoding": "gzip" }, "{}"), ids, 415, "UNSUPPORTED_CONTENT_ENCODING");
    expectEvery(await send({}, JSON.stringify({ version: "x".repeat(2000) })), ids, 413, "REQUEST_TOO_LARGE");
  });

  s("every operation: 503 AUTH_KEYS_UNAVAILABLE with Retry-After when the signing keys cannot be fetched", async () => {
    // A port that was just free: the JWKS fetch is refused.
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const svc = await startService(backend, {
      env: { AUTH_JWT_SECRET: "", AUTH_JWKS_URL: `http://127.0.0.1:${port}/jwks.json`, AUTH_JWKS_COOLDOWN_SECONDS: "0" },
    });
    try {
      const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
      const rsToken = `${b64({ alg: "RS256", kid: "k1", typ: "JWT" })}.${b64({ sub: "x", exp: Math.floor(Date.now() / 1000) + 600 })}.${"A".repeat(43)}`;
      const client = svc.restAs({ authorization: `Bearer ${rsToken}` });
      const answers = await eachOperation((op) => client.request(op.method, fill(op.template), op.readsBody ? {} : undefined));
      expectEvery(answers, operations().map((o) => o.id), 503, "AUTH_KEYS_UNAVAILABLE");
      assert.ok(Object.values(answers).every((a) => Number(a.headers.get("retry-after")) >= 1), "Retry-After on every 503");
    } finally {
      await svc.close();
    }
  });

  s("every operation: 504 DEADLINE_EXCEEDED when authentication hangs past the deadline; 503 SHUTTING_DOWN when the server stops waiting", async () => {
    const never: Authenticator = { authenticate: () => new Promise<never>(() => undefined) };
    const svc = await startService(backend, { authenticator: never, env: { REQUEST_DEADLINE_MS: "300" } });
    try {
      const answers = await eachOperation((op) => svc.rest.request(op.method, fill(op.template), op.readsBody ? {} : undefined));
      expectEvery(answers, operations().map((o) => o.id), 504, "DEADLINE_EXCEEDED");
    } finally {
      await svc.close();
    }
    const stopping = await startService(backend, { authenticator: never, env: { REQUEST_DEADLINE_MS: "60000", SHUTDOWN_TIMEOUT_MS: "200" } });
    const pending = stopping.rest.get(fill("/api/entities/{entity_id}/active-version"));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const closing = stopping.close();
    const cut = await pending;
    await closing;
    assert.equal([cut.status, cut.body.code], [503, "SHUTTING_DOWN"]);
  });

  s("every unary operation: 429 TOO_MANY_CALLS while the server's calls are at their limit", async () => {
    const never: Authenticator = { authenticate: () => new Promise<never>(() => undefined) };
    const svc = await startService(backend, { authenticator: never, env: { HTTP_MAX_CALLS_IN_FLIGHT: "1", HTTP_MAX_CALLS_QUEUED: "0", REQUEST_DEADLINE_MS: "60000", SHUTDOWN_TIMEOUT_MS: "100" } });
    try {
      // The one place, held by a call whose authentication never ends.
      const holder = svc.rest.get(fill("/api/entities/{entity_id}/active-version"));
      await new Promise((resolve) => setTimeout(resolve, 100));
      const unary = operations().filter((o) => !o.template.endsWith(":watch"));
      const answers: Record<string, { status: number; code: string }> = {};
      for (const op of unary) {
        const res = await svc.rest.request(op.method, fill(op.template), op.readsBody ? {} : undefined);
        answers[op.id] = { status: res.status, code: res.body?.code };
      }
      expectEvery(answers, unary.map((o) => o.id), 429, "TOO_MANY_CALLS");
      holder.catch(() => undefined);
    } finally {
      await svc.close();
    }
  });

  s("every operation: 408 when the body stalls (a GET's announced and never sent); with a body: 429 while the server's bodies in flight are at the limit", async ({ svc }) => {
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    const withBody = operations().filter((o) => o.readsBody);
    const stalled = await Promise.all(withBody.map((op) => rawRequest(svc.url, backend, op.method, fill(op.template), { ...auth, "content-length": "900" }, "{", true)));
    expectEvery(Object.fromEntries(withBody.map((op, i) => [op.id, stalled[i]!])), withBody.map((o) => o.id), 408, "REQUEST_BODY_TIMEOUT");
    // A GET that announces a body (chunked) and never sends it is waited for as long, and answered as documented.
    const gets = operations().filter((o) => !o.readsBody);
    const announced = await Promise.all(gets.map((op) => rawRequest(svc.url, backend, op.method, fill(op.template), { ...auth, "transfer-encoding": "chunked" }, "", true)));
    expectEvery(Object.fromEntries(gets.map((op, i) => [op.id, announced[i]!])), gets.map((o) => o.id), 408, "REQUEST_BODY_TIMEOUT");
    // One body holds 1000 of the server's 1500 bytes; every other one of 600 is refused.
    const holder = rawRequest(svc.url, backend, "POST", fill("/api/entities/{entity_id}/shares"), { ...auth, "content-length": "1024" }, " ".repeat(1000), true);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const crowded: Array<{ status: number; code: string }> = [];
    for (const op of withBody) crowded.push(await rawRequest(svc.url, backend, op.method, fill(op.template), { ...auth, "content-length": "600" }, " ".repeat(600), false));
    expectEvery(Object.fromEntries(withBody.map((op, i) => [op.id, crowded[i]!])), withBody.map((o) => o.id), 429, "IN_FLIGHT_BYTES_EXCEEDED");
    assert.is((await holder).code, "REQUEST_BODY_TIMEOUT");
  });

  s("a request body the document takes is one the service takes: either JSON name of each field, and no other key", async ({ svc }) => {
    const samples = await validSamples(svc);
    const withBody = operations().filter((o) => o.readsBody);
    assert.ok(withBody.length > 0);
    const document = apiDocument();
    for (const op of withBody) {
      const url = fill(op.template, { entity_id: samples["entity_id"] as string });
      const schema = document.document.paths[op.template][op.method.toLowerCase()].requestBody?.content["application/json"].schema;
      if (schema === undefined) continue; // no body: DELETE
      const ref = (schema.$ref as string).split("/").pop()!;
      const required = requiredOf(document.document.components.schemas[ref]);
      const camel = (name: string) => name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
      const body = Object.fromEntries(required.map((name) => [name, samples[name]]));
      assert.equal(document.requestBodyProblems(op.method, url, body), [], `${op.id}: its required fields`);
      // The document's canonical names are snake_case; the other spelling
      // of a key is taken, required fields too, held to the same schema, and
      // not both at once, as the service takes them.
      const camelBody = Object.fromEntries(required.map((name) => [camel(name), samples[name]]));
      assert.equal(document.requestBodyProblems(op.method, url, camelBody), [], `${op.id}: its required fields in lowerCamelCase`);
      const service = await svc.rest.request(op.method, url, camelBody);
      assert.ok(service.status < 400 || !/^Invalid|is unknown|missing/i.test(String(service.body.error)), `${op.id}: the service takes the lowerCamelCase body: ${JSON.stringify(service.body)}`);
      const spelt = Object.fromEntries(Object.keys(document.document.components.schemas[ref].properties as object).map((name) => [camel(name), samples[name] ?? null]));
      assert.equal(document.requestBodyProblems(op.method, url, { ...body, ...spelt }).filter((p) => p.includes("property name")), [], `${op.id}: lowerCamelCase`);
      for (const name of required.filter((n) => camel(n) !== n)) {
        assert.ok(document.requestBodyProblems(op.method, url, { ...body, [camel(name)]: samples[name] }).length > 0, `${op.id}: ${name} in both spellings is refused`);
        const typed = document.document.components.schemas[ref].properties[name] as Json;
        if (typed["pattern"] !== undefined) {
          assert.ok(document.requestBodyProblems(op.method, url, { ...camelBody, [camel(name)]: "!! not valid" }).length > 0, `${op.id}: ${camel(name)} is held to ${name}'s pattern`);
        }
      }
      assert.ok(document.requestBodyProblems(op.method, url, { ...body, note: "x" }).length > 0, `${op.id}: the document refuses an unknown key`);
      // A path's field repeated in the body, as the service takes it when the values agree.
      assert.equal(document.requestBodyProblems(op.method, url, { ...body, entity_id: samples["entity_id"] }), [], `${op.id}: entity_id repeated`);
      const refused = await svc.rest.request(op.method, url, { ...body, note: "x" });
      assert.equal([refused.status, refused.body.code], [400, "INVALID_ARGUMENT"], `${op.id}: the service refuses it`);
      assert.match(refused.body.error, "note", op.id);
    }
  });

  s("the request fields the proto marks REQUIRED (which the document requires) are exactly those each RPC refuses to go without", async ({ svc }) => {
    // A valid value of each field an RPC may ask for, so that only a missing one is refused.
    const samples = await validSamples(svc);
    const auth = { authorization: svc.rest.defaultHeaders["authorization"]! };
    for (const service of [EntityVersionsService, EntityAccessService, EntityEventsService]) {
      // Unary RPCs: a stream's refusal comes in its end-of-stream message instead.
      for (const method of service.methods.filter((m) => m.methodKind === "unary")) {
        const marked = method.input.fields.filter((f) => getOption(f, field_behavior).includes(FieldBehavior.REQUIRED)).map((f) => f.name);
        // Each answer names the first field it lacks; given that one, the next.
        const lacking: string[] = [];
        const body: Record<string, unknown> = {};
        for (let round = 0; round <= method.input.fields.length; round++) {
          const res = await fetch(`${svc.url}/${service.typeName}/${method.name}`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify(body) });
          const answer = (await res.json()) as { message?: string };
          const field = /^Invalid (\w+): /.exec(answer.message ?? "")?.[1];
          if (res.status !== 400 || field === undefined) break;
          assert.not.ok(field in body, `${method.name}: the sample ${field} ${JSON.stringify(body[field])} is refused: ${answer.message}`);
          assert.ok(field in samples, `${method.name} needs ${field}, which has no sample here`);
          lacking.push(field);
          body[field] = samples[field];
        }
        assert.equal(lacking.sort(), marked.sort(), `${service.name}.${method.name}`);
      }
    }
  });

  s("every pattern and bound the document states on a request field is one the service holds it to", async ({ svc }) => {
    const { document } = apiDocument();
    const resolve = (schema: Json): Json => (schema["$ref"] === undefined ? schema : document.components.schemas[(schema["$ref"] as string).split("/").pop()!]);
    // A value the pattern refuses: most refuse "!bad", an id that may hold any printable character refuses a space.
    const breaksPattern = (pattern: string) => ["!bad", "bad id"].find((v) => !new RegExp(pattern, "u").test(v));
    const violates = (schema: Json) => (schema["pattern"] !== undefined ? breaksPattern(schema["pattern"] as string) : schema["minimum"] !== undefined ? (schema["minimum"] as number) - 1 : undefined);
    const checked: string[] = [];
    for (const [template, methods] of Object.entries(document.paths as Record<string, Record<string, Json>>)) {
      for (const [verb, op] of Object.entries(methods)) {
        const samples = await validSamples(svc);
        const bodySchema = op["requestBody"] === undefined ? undefined : resolve(op["requestBody"].content["application/json"].schema);
        const bodyFields = Object.keys(bodySchema?.["properties"] ?? {});
        const constrained: Array<{ where: "path" | "query" | "body"; name: string; bad: unknown }> = [];
        for (const p of (op["parameters"] ?? []) as Json[]) {
          const bad = violates(p["schema"]);
          if (bad !== undefined) constrained.push({ where: p["in"], name: p["name"], bad });
        }
        for (const [name, property] of Object.entries((bodySchema?.["properties"] ?? {}) as Record<string, Json>)) {
          const bad = violates(property) ?? (violates(property["items"] ?? {}) === undefined ? undefined : [violates(property["items"])]);
          if (bad !== undefined) constrained.push({ where: "body", name, bad });
        }
        for (const field of constrained) {
          const value = (name: string) => (name === field.name ? field.bad : samples[name]);
          const path = template.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(String(value(name) ?? "x")));
          const query = field.where === "query" ? `?${new URLSearchParams({ [field.name]: String(field.bad) })}` : "";
          const body = bodySchema === undefined ? undefined : Object.fromEntries(bodyFields.filter((f) => value(f) !== undefined).map((f) => [f, value(f)]));
          const res = await svc.rest.request(verb.toUpperCase(), `${path}${query}`, body);
          const what = `${op["operationId"]}: ${field.where} ${field.name} = ${JSON.stringify(field.bad)}`;
          assert.is(res.status, 400, `${what}: ${JSON.stringify(res.body)}`);
          assert.is(res.body.code, "INVALID_ARGUMENT", what);
          assert.match(res.body.error, new RegExp(`^Invalid ${field.name}: `), `${what}: ${res.body.error}`);
          checked.push(`${field.where} ${field.name}`);
        }
      }
    }
    // The document states these (a guard against a generator that silently stops writing them).
    for (const expected of ["path entity_id", "path version_id", "query page_size", "query after_event_id", "body source_hash", "body version", "body base_version_id", "body service_dependencies", "body expected_active_version_id", "path user_id", "body user_id", "path org_id"]) {
      assert.ok(checked.includes(expected), `no operation states a constraint on ${expected}`);
    }
  });

  s("every operation: 500 INTERNAL, saying nothing of the cause, when a bug throws", async () => {
    const svc = await startService(backend, {
      authenticator: {
        authenticate: async () => {
          throw new TypeError("secret detail of a bug");
        },
      },
    });
    try {
      const answers = await eachOperation((op) => svc.rest.request(op.method, fill(op.template), op.readsBody ? {} : undefined));
      expectEvery(answers, operations().map((o) => o.id), 500, "INTERNAL");
    } finally {
      await svc.close();
    }
  });

  return s;
}

/**
 * Runs after every other contract suite of the backend: their REST
 * answers, each held to the document as it arrived, must have reached
 * every status of every operation; and, once both backends ran, every
 * error code the document lists.
 */
export function openapiCoverageSuite(backend: Backend) {
  const s = suite(`${backend}: OpenAPI: the contract suites reached every documented answer`);

  s("every (operation, status) of the document was answered and matched it", () => {
    const seen = new Set([...answersSeen[backend]].map((k) => k.split(" ").slice(0, 2).join(" ")));
    const documented = operations().flatMap((op) =>
      Object.keys((apiDocument().document.paths[op.template][op.method.toLowerCase()] as Json).responses).map((status) => `${op.id} ${status}`),
    );
    console.log(`\n  OpenAPI (${backend}): ${seen.size} of ${documented.length} documented (operation, status) answers reached`);
    assert.equal(documented.filter((d) => !seen.has(d)), [], "documented answers no test reached");
  });

  s("every documented error code was answered by some operation", () => {
    const codes = new Set<string>();
    const collect = (node: unknown): void => {
      if (Array.isArray(node)) node.forEach(collect);
      else if (typeof node === "object" && node !== null) {
        const o = node as Json;
        if (o["properties"]?.code?.enum !== undefined) (o["properties"].code.enum as string[]).forEach((c) => codes.add(c));
        Object.values(o).forEach(collect);
      }
    };
    collect(apiDocument().document);
    const answered = new Set([...answersSeen.mysql, ...answersSeen.sqlite].map((k) => k.split(" ")[2]));
    const missing = [...codes].filter((c) => !answered.has(c)).sort();
    if (answersSeen.mysql.size === 0 || answersSeen.sqlite.size === 0) {
      console.log(`\n  OpenAPI: codes not checked until both backends ran; not reached yet: ${missing.join(", ") || "none"}`);
      return;
    }
    assert.equal(missing, [], "documented error codes no test reached");
  });

  return s;
}

import { create, type DescMessage, fromBinary, fromJsonString, ScalarType, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import knexFactory from "knex";
import * as assert from "uvu/assert";
import { EntityAccessService } from "../../gen/entityversions/v1/entity_access_pb.js";
import { EntityVersionsService, GetUploadUrlRequestSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { http } from "../../gen/google/api/annotations_pb.js";
import { type RestBinding, restBindings } from "../../src/rest/http-rules.js";
import type { Backend } from "../support/env.js";
import { apiDocument } from "../support/openapi.js";
import { answersSeen, newEntityId, push, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

/** A small seeded PRNG (mulberry32), so a failing run can be replayed with FUZZ_SEED. */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => int(256)));
  return { next, int, pick, bytes };
}

/** The JSON kind a field's proto3 JSON form takes, so a "wrong type" is never one it accepts. */
function fieldJsonKind(message: DescMessage, name: string): string {
  const field = message.fields.find((f) => f.name === name)!;
  if (field.fieldKind === "list") return "array";
  if (field.fieldKind === "map" || field.fieldKind === "message") return "object";
  if (field.fieldKind === "enum") return "string";
  switch (field.scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return "string";
    case ScalarType.BOOL:
      return "boolean";
    default:
      return "number";
  }
}

function jsonKind(value: unknown): string {
  return Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
}

const badIds = ["bad.id", "has space", "", "x".repeat(200), "%00", "..", "ü-umlaut", "a/b", "%2e%2e", "tab\there", "-leading-dash"];
// A user or organization id is any 1 to 255 printable characters without
// spaces ("a/b" and "bad.id" are ids): these are not.
const badPrincipals = ["has space", "tab\there", "x".repeat(256), "ctl\u0085char", "bad\uFFFDchar"];
// No null: proto3 JSON reads null as "unset", a valid request.
const wrongTypes = [{}, [], true, 12.5, -1, "string", [1, "a"], { nested: { deep: [] } }];
const badValues: Record<string, unknown[]> = {
  version: ["2026.02.30-000000", "2026.13.01-000000", "20261121-093000", "", "2026.11.21-246000", "x".repeat(5000)],
  source_hash: ["ABC", "g".repeat(64), "a".repeat(63), "", "a".repeat(65)],
  base_version_id: ["bad id", "x".repeat(65), "a/b"],
  storage_path: ["other/00000000-0000-4000-8000-000000000000/package", "../x", "", "a".repeat(600)],
  package_lock_path: ["other/00000000-0000-4000-8000-000000000000/package-lock.json", "x"],
  file_size_bytes: [0, -1, 1e15, "12a", 1.5, "1e3"],
  service_dependencies: [["Bad Slug"], ["a", "a"], ["x".repeat(64)], Array.from({ length: 200 }, (_, i) => `s${i}`)],
  package_json: [[1, 2], "text", 5],
  version_id: ["bad id", "x".repeat(65), "a.b"],
  user_id: ["has space", "", "x".repeat(300), "tab\tx"],
  org_id: ["has space", "", "x".repeat(300)],
  page_size: [-1, -1000, "abc", 1.5],
};

/** Every RPC, over every protocol, with malformed input: no 5xx, no crash, nothing written. */
export function fuzzSuite(backend: Backend) {
  const s = serviceSuite("fuzz: 1,400 malformed requests across every RPC", backend);

  s("REST, gRPC and Connect survive malformed requests without a 5xx or a write", async ({ svc }) => {
    const seed = Number(process.env["FUZZ_SEED"] ?? 20261121);
    const r = rng(seed);
    const e = newEntityId();
    const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
    const up = await uploadOnly(svc, e, { base: v1.id });
    const valid: Record<string, unknown> = {
      entity_id: e,
      version: "2027.01.01-000000",
      source_hash: "c".repeat(64),
      base_version_id: v1.id,
      storage_path: up.res.body.storage_path,
      package_lock_path: up.res.body.package_lock_path,
      file_size_bytes: Buffer.byteLength(up.content),
      version_id: v1.id,
      user_id: "someone",
      org_id: "some-org",
      page_size: 5,
    };
    const knex = knexFactory(svc.env["DATABASE_URL"]!.startsWith("sqlite:")
      ? { client: "better-sqlite3", connection: { filename: svc.env["DATABASE_URL"]!.slice(7) }, useNullAsDefault: true }
      : { client: "mysql2", connection: svc.env["DATABASE_URL"]! });
    const tables = ["entities", "versions", "uploads", "entity_publishers", "entity_shares", "entity_org_stores"];
    const snapshot = async () => {
      const out: Record<string, unknown> = {};
      for (const t of tables) out[t] = await knex(t).select("*").orderBy(t === "entities" || t === "versions" || t === "uploads" ? "id" : "entity_id");
      return JSON.stringify(out);
    };
    const before = await snapshot();
    const failures: string[] = [];
    const bindings = restBindings([EntityVersionsService, EntityAccessService], http);

    // REST: each request carries at least one fault that must be refused.
    for (let i = 0; i < 800; i++) {
      const b: RestBinding = r.pick(bindings);
      const fields = b.method.input.fields.map((f) => f.name).filter((n) => n !== "entity_id" && !b.variables.some((v) => v.fieldPath[0]!.name === n));
      const pathValues: Record<string, string> = Object.fromEntries(b.variables.map((v) => [v.fieldPath[0]!.name, String(valid[v.fieldPath[0]!.name])]));
      const body: Record<string, unknown> = Object.fromEntries(fields.filter((f) => valid[f] !== undefined).map((f) => [f, valid[f]]));
      let raw: string | undefined;
      let contentType: string | undefined = "application/json";
      let auth = svc.rest.defaultHeaders;
      const query: string[] = [];
      const faults = ["bad-path-id", "bad-auth", ...(b.body === undefined ? ["bad-query"] : ["bad-json", "non-object", "wrong-type", "unknown-field", "bad-content-type"]), ...(fields.some((f) => badValues[f]) ? ["bad-value"] : [])];
      const fault = r.pick(faults);
      switch (fault) {
        case "bad-path-id": {
          const variable = r.pick(b.variables).fieldPath[0]!.name;
          pathValues[variable] = r.pick(variable === "entity_id" || variable === "version_id" ? badIds.filter((x) => x !== "" && x !== "..") : badPrincipals);
          break;
        }
        case "bad-auth":
          auth = r.pick<Record<string, string>>([{}, { authorization: "Bearer x.y.z" }, { authorization: `Bearer ${r.bytes(20).toString("base64url")}` }, { authorization: "Basic Zm9vOmJhcg==" }]);
          break;
        case "bad-query":
          query.push(r.pick(["page_size=abc", "page_size=-5", "page_token=forged.token", "nope=1", "page_size=99999999999999999999"]));
          if (b.method.name !== "ListVersions" && query[0]!.startsWith("page")) query[0] = "unknown_param=1";
          break;
        case "bad-json":
          raw = r.pick(["{", '{"a":', "not json", "{'single': 1}", '{"version": "2026.01.01-000000",}', r.bytes(r.int(64) + 1).toString("latin1")]);
          break;
        case "non-object":
          raw = JSON.stringify(r.pick([[1, 2], "str", 12, null, true]));
          break;
        case "wrong-type": {
          const f = r.pick(fields.length > 0 ? fields : ["entity_id"]);
          body[f] = r.pick(wrongTypes.filter((w) => jsonKind(w) !== fieldJsonKind(b.method.input, f)));
          if (fields.length === 0 || JSON.stringify(body[f]) === JSON.stringify(valid[f])) body["unknown_field"] = 1;
          break;
        }
        case "unknown-field":
          body[r.pick(["colour", "__proto__x", "baseVersion", "entity", "id"])] = r.pick(wrongTypes);
          break;
        case "bad-content-type":
          contentType = r.pick(["text/plain", "application/x-www-form-urlencoded", "application/xml", "multipart/form-data; boundary=x", undefined]);
          if (contentType === undefined) raw = "{}x";
          break;
        case "bad-value": {
          const f = r.pick(fields.filter((x) => badValues[x]));
          const bad = r.pick(badValues[f]!);
          if (b.body === undefined) query.push(`${f}=${encodeURIComponent(String(bad))}`);
          else body[f] = bad;
          break;
        }
      }
      let path = b.template;
      for (const [name, value] of Object.entries(pathValues)) path = path.replace(`{${name}}`, encodeURIComponent(value));
      if (query.length > 0) path += `?${query.join("&")}`;
      const headers: Record<string, string> = { ...auth, ...(contentType === undefined ? {} : { "content-type": contentType }) };
      const payload = b.body === undefined ? undefined : (raw ?? JSON.stringify(body));
      let res: Response;
      try {
        res = await fetch(`${svc.url}${path}`, { method: b.verb, headers, ...(payload === undefined ? {} : { body: payload }) });
      } catch (error) {
        failures.push(`REST ${b.verb} ${path} [${fault}]: ${(error as Error).message}`);
        continue;
      }
      const text = await res.text();
      let json: { code?: unknown } | undefined;
      try {
        json = JSON.parse(text) as { code?: unknown };
      } catch {
        json = undefined;
      }
      if (res.status >= 500 || res.status < 400 || typeof json?.code !== "string") failures.push(`REST ${b.verb} ${path} [${fault}] ${payload?.slice(0, 80)} → ${res.status} ${text.slice(0, 120)}`);
      // Each refusal is one of the operation's documented answers, shaped as documented.
      failures.push(...apiDocument().problems({ method: b.verb, path, status: res.status, headers: res.headers, body: json ?? text }, answersSeen[backend]).map((p) => `REST [${fault}] ${p}`));
    }

    // gRPC: random bytes, truncated and invalid messages to every method.
    const client = new grpc.Client(svc.url.replace("http://", ""), grpc.credentials.createInsecure());
    // Every RPC's request has entity_id as field 1 and validates it first, so
    // an invalid one keeps every truncation (and every method) invalid.
    const invalid = toBinary(GetUploadUrlRequestSchema, create(GetUploadUrlRequestSchema, { entityId: "bad.entity", version: "2026.13.45-999999", sourceHash: "c".repeat(64), baseVersionId: v1.id }));
    const methods = [...EntityVersionsService.methods, ...EntityAccessService.methods];
    const forbidden = new Set([grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.DATA_LOSS, grpc.status.UNAVAILABLE, grpc.status.OK]);
    for (let i = 0; i < 400; i++) {
      const m = r.pick(methods);
      const kind = r.pick(["random", "truncated", "invalid-fields", "empty", "bad-auth"]);
      const payload =
        kind === "random" ? r.bytes(r.int(200) + 1)
        : kind === "truncated" ? Buffer.from(invalid.subarray(0, r.int(invalid.length)))
        : kind === "invalid-fields" ? Buffer.from(toBinary(m.input as DescMessage, create(m.input as DescMessage, { entityId: r.pick(badIds.filter((x) => x !== "")) } as never)))
        : kind === "empty" ? Buffer.alloc(0)
        : Buffer.from(invalid);
      const md = new grpc.Metadata();
      if (kind !== "bad-auth") md.set("authorization", svc.rest.defaultHeaders["authorization"]!);
      else md.set("authorization", `Bearer ${r.bytes(10).toString("hex")}`);
      const code = await new Promise<number>((resolve) =>
        client.makeUnaryRequest(`/${m.parent.typeName}/${m.name}`, (x: Buffer) => x, (x: Buffer) => x, payload, md, { deadline: Date.now() + 10_000 }, (err) => resolve(err?.code ?? grpc.status.OK)),
      );
      // A message that does not decode is INTERNAL, as gRPC's status code
      // doc ("Error parsing request proto") and Connect answer it; anything
      // that decodes must be refused with a client error.
      const decodes = (() => {
        try {
          fromBinary(m.input as DescMessage, payload);
          return true;
        } catch {
          return false;
        }
      })();
      const refusedAsUndecodable = !decodes && code === grpc.status.INTERNAL && kind !== "bad-auth";
      if (forbidden.has(code) && !refusedAsUndecodable) failures.push(`gRPC ${m.name} [${kind}] ${payload.toString("hex").slice(0, 40)} → ${grpc.status[code]}`);
    }
    client.close();

    // Connect: binary and JSON bodies that do not decode.
    for (let i = 0; i < 200; i++) {
      const m = r.pick(methods);
      const proto = r.next() < 0.5;
      const body = proto ? Buffer.from(invalid.subarray(0, r.int(invalid.length))) : r.pick(["{", "[]", '{"entityId": 5}', '{"entityId": "bad.id"}', r.bytes(30).toString("latin1")]);
      const res = await fetch(`${svc.url}/${m.parent.typeName}/${m.name}`, {
        method: "POST",
        headers: { ...svc.rest.defaultHeaders, "content-type": proto ? "application/proto" : "application/json" },
        body,
      });
      await res.arrayBuffer();
      const undecodable = (() => {
        try {
          if (proto) fromBinary(m.input as DescMessage, body as Buffer);
          else fromJsonString(m.input as DescMessage, body as string);
          return false;
        } catch {
          return true;
        }
      })();
      // Connect answers a message that does not decode INTERNAL (HTTP 500), as gRPC does.
      if ((res.status >= 500 && !(undecodable && res.status === 500)) || res.status < 400) failures.push(`Connect ${m.name} ${proto ? "proto" : "json"} → ${res.status}`);
    }

    assert.equal(failures.slice(0, 20), [], `seed ${seed}: ${failures.length} failures`);
    assert.is((await svc.restAs({}).get("/healthz")).status, 200, "the process is up");
    assert.ok((await snapshot()) === before, "nothing was written");
    await knex.destroy();
  });

  return s;
}

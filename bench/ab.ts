// npm run bench:ab -- --b DATABASE_READ_BATCH_MAX=1 [--b NAME=VALUE …] [--b-node-flags=…] [--ops reads,grpc,confirms,racers] [--runs N] [--duration S]
//
// A same-run A/B of one setting: two service processes side by side on the
// same MariaDB database and Azurite, A as configured by default and B with
// the given settings (or Node flags), loaded in turn (A, B, B, A, …) so
// that both see the same drift of the machine. Reports each one's
// throughput and CPU per request, and B over A. This is the evidence a
// performance switch in docs/performance.md records.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { fromJson, toBinary } from "@bufbuild/protobuf";
import knexFactory from "knex";
import { EntityVersionsService } from "../gen/entityversions/v1/entity_versions_pb.js";
import { mintToken } from "../src/auth/tokens.js";
import { startEmbeddedAzurite } from "../src/blob/embedded-azurite.js";
import { LeanHttp1 } from "./lean-http1.js";
import { closedLoop, h2load, h2loadAvailable, median, runBatch } from "./load.js";
import { measured } from "./proc.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: args } = parseArgs({
  options: {
    b: { type: "string", multiple: true, default: [] },
    "b-node-flags": { type: "string" },
    ops: { type: "string", default: "reads,confirms" },
    runs: { type: "string", default: "4" },
    duration: { type: "string", default: "5" },
    entities: { type: "string", default: "200" },
    confirms: { type: "string", default: "600" },
  },
});
const runs = Number(args.runs);
const durationMs = Number(args.duration) * 1000;
const ops = new Set(args.ops.split(","));
if (ops.has("grpc") && !h2loadAvailable()) throw new Error("--ops grpc loads through h2load: apt-get install nghttp2-client");
const overrides = Object.fromEntries((args.b as string[]).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
const mysqlUrl = process.env["BENCH_MYSQL_URL"] ?? "mysql://root:@127.0.0.1:3306";
const secret = "bench-secret-0123456789abcdef0123456789";
const concurrency = 32;
const log = (line: string) => process.stdout.write(`${line}\n`);
const startProd = (JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts["start:prod"] ?? "";
const prodFlags = (/^(?:exec )?node (.*?) ?dist\/src\/main\.js$/.exec(startProd)?.[1] ?? "").split(" ").filter((f) => f !== "");
const children: ChildProcess[] = [];

function startService(env: Record<string, string>, nodeFlags: string[]): Promise<{ url: string; pid: number }> {
  const child = spawn(process.execPath, [...nodeFlags, path.join(root, "dist/src/main.js")], { cwd: root, env: { PATH: process.env["PATH"] ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  return new Promise((resolve, reject) => {
    let text = "";
    const onData = (chunk: Buffer) => {
      text += chunk.toString();
      const m = /entity-versions listening on (http:\/\/[^\s"]+)/.exec(text);
      if (m !== null) {
        child.stdout!.off("data", onData);
        child.stdout!.resume();
        child.stderr!.resume();
        resolve({ url: m[1]!, pid: child.pid! });
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", (c: Buffer) => (text += c.toString()));
    child.once("exit", (code) => reject(new Error(`service exited with ${code}: ${text.slice(-1500)}`)));
  });
}

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
let versionCounter = 0;
const nextVersion = () => {
  const d = new Date(Date.UTC(2031, 0, 1) + versionCounter++ * 1000);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getUTCFullYear()}.${p(d.getUTCMonth() + 1)}.${p(d.getUTCDate())}-${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}`;
};

async function main() {
  log("building …");
  execFileSync(path.join(root, "node_modules/.bin/tsc"), ["-p", root], { stdio: "inherit" });
  const dbName = `ev_ab_${process.pid}`;
  const admin = knexFactory({ client: "mysql2", connection: `${mysqlUrl}/mysql`, pool: { min: 0, max: 1 } });
  await admin.raw(`CREATE DATABASE \`${dbName}\` CHARACTER SET utf8mb4`);
  const azurite = await startEmbeddedAzurite({});
  const env = {
    HOST: "127.0.0.1",
    PORT: "0",
    DATABASE_URL: `${mysqlUrl}/${dbName}`,
    AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString,
    AZURE_STORAGE_CONTAINER: "bench",
    AUTH_JWT_SECRET: secret,
    PAGE_TOKEN_SECRET: secret,
    DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "ev-ab-")),
    LOG_LEVEL: "info",
    // Production's settings, but NODE_ENV=test: production refuses the
    // storage emulator's public key, and runs no differently otherwise.
    NODE_ENV: "test",
    AUTH_MAX_TOKEN_LIFETIME: "86400",
  };
  const a = await startService(env, prodFlags);
  const b = await startService({ ...env, ...overrides }, args["b-node-flags"] === undefined ? prodFlags : args["b-node-flags"].split(" ").filter((f) => f !== ""));
  const label = [...Object.entries(overrides).map(([k, v]) => `${k}=${v}`), ...(args["b-node-flags"] === undefined ? [] : [`node ${args["b-node-flags"]}`])].join(" ");
  log(`A: defaults; B: ${label}`);
  const auth = { authorization: `Bearer ${await mintToken(secret, { sub: "bench", roles: ["publisher"], ttlSeconds: 7200 })}` };
  const clients = { a: new LeanHttp1(a.url, auth), b: new LeanHttp1(b.url, auth) };

  const put = async (url: string, content: string) => {
    const res = await fetch(url, { method: "PUT", body: content, headers: { "x-ms-blob-type": "BlockBlob", "content-type": "application/octet-stream" } });
    await res.arrayBuffer();
    if (res.status !== 201) throw new Error(`PUT ${res.status}`);
  };
  const prepare = async (client: LeanHttp1, entity: string, base?: string) => {
    const version = nextVersion();
    const hash = sha(`${entity}/${version}/${randomBytes(4).toString("hex")}`);
    const up = await client.post(`/api/entities/${entity}/versions/upload-url`, JSON.stringify({ version, source_hash: hash, base_version_id: base }));
    const body = JSON.parse(up.body.toString()) as { upload_url: string; storage_path: string };
    const content = `package ${entity} ${version}`;
    await put(body.upload_url, content);
    return JSON.stringify({ storage_path: body.storage_path, version, source_hash: hash, file_size_bytes: Buffer.byteLength(content), set_as_active: true, base_version_id: base });
  };

  const entities = Array.from({ length: Number(args.entities) }, (_, i) => `ab-${i}`);
  if (ops.has("reads") || ops.has("grpc")) {
    log(`seeding ${entities.length} entities …`);
    await runBatch(
      entities.map((e) => async () => {
        const res = await clients.a.post(`/api/entities/${e}/versions/confirm`, await prepare(clients.a, e));
        return res.status === 201 ? true : `${res.status}`;
      }),
      16,
    );
  }

  type Result = { rps: number; cpuPerRequestUs: number; p99: number; rssMb: number };
  const table: Array<{ op: string; a: Result[]; b: Result[] }> = [];
  const measure = async (pid: number, work: () => Promise<{ rps: number; requests: number; p99: number; errors: number }>): Promise<Result> => {
    const m = await measured(pid, work);
    if (m.result.errors > 0) throw new Error(`${m.result.errors} errors`);
    return { rps: m.result.rps, cpuPerRequestUs: (m.cpuCores / m.result.rps) * 1e6, p99: m.result.p99, rssMb: m.rssMb };
  };
  const run = async (op: string, one: (side: "a" | "b") => Promise<Result>) => {
    const row = { op, a: [] as Result[], b: [] as Result[] };
    for (let r = 0; r < runs; r++) {
      // A, B, then B, A: each side goes first as often.
      for (const side of r % 2 === 0 ? (["a", "b"] as const) : (["b", "a"] as const)) {
        row[side].push(await one(side));
        log(`  ${op} run ${r + 1} ${side.toUpperCase()}: ${row[side].at(-1)!.rps.toFixed(0)}/s`);
      }
    }
    table.push(row);
  };
  const pids = { a: a.pid, b: b.pid };
  if (ops.has("reads")) {
    await run("GetActiveVersion (REST)", (side) =>
      measure(pids[side], () =>
        closedLoop({
          concurrency,
          warmupMs: 1000,
          durationMs,
          call: async (_w, n) => {
            const res = await clients[side].get(`/api/entities/${entities[(n * 7919) % entities.length]}/active-version`);
            return res.status === 200 ? true : `${res.status}`;
          },
        }),
      ),
    );
  }
  if (ops.has("grpc")) {
    // GetActiveVersion over gRPC, 32 streams on one HTTP/2 connection, by
    // h2load (Debian's nghttp2-client): one request body, so one entity.
    const desc = EntityVersionsService.method.getActiveVersion;
    const message = toBinary(desc.input, fromJson(desc.input, { entityId: entities[0]! }));
    const framed = new Uint8Array(5 + message.length);
    new DataView(framed.buffer).setUint32(1, message.length);
    framed.set(message, 5);
    const urls = { a: a.url, b: b.url };
    await run("GetActiveVersion (gRPC)", (side) =>
      measure(pids[side], () =>
        h2load({
          urls: [`${urls[side]}/${EntityVersionsService.typeName}/GetActiveVersion`],
          h1: false,
          headers: { ...auth, "content-type": "application/grpc", te: "trailers" },
          body: framed,
          expectStatus: 200,
          concurrency,
          warmupMs: 1000,
          durationMs,
        }),
      ),
    );
  }
  if (ops.has("confirms")) {
    let round = 0;
    await run("ConfirmUpload, distinct entities (REST)", async (side) => {
      const fresh = Array.from({ length: Number(args.confirms) }, (_, i) => `ab-c${round}-${side}-${i}`);
      round++;
      const bodies: Array<[string, string]> = [];
      await runBatch(fresh.map((e) => async () => (bodies.push([e, await prepare(clients[side], e)]), true as const)), 32);
      return measure(pids[side], () =>
        runBatch(
          bodies.map(([e, body]) => async () => {
            const res = await clients[side].post(`/api/entities/${e}/versions/confirm`, body);
            return res.status === 201 ? true : `${res.status} ${res.body.toString().slice(0, 80)}`;
          }),
          concurrency,
        ),
      );
    });
  }

  if (ops.has("racers")) {
    // 100 confirms from one base on one entity at once: one creates, the
    // rest are refused STALE_BASE. "req/s" is the racers over the time the
    // last one was answered in; "p99" that time.
    const racers = 100;
    const hot = { a: `ab-hot-a-${randomBytes(3).toString("hex")}`, b: `ab-hot-b-${randomBytes(3).toString("hex")}` };
    const tip = { a: "", b: "" };
    for (const side of ["a", "b"] as const) {
      const res = await clients[side].post(`/api/entities/${hot[side]}/versions/confirm`, await prepare(clients[side], hot[side]));
      tip[side] = (JSON.parse(res.body.toString()) as { version: { id: string } }).version.id;
    }
    await run(`${racers} racers on one entity (REST)`, async (side) => {
      const bodies = await Promise.all(Array.from({ length: racers }, () => prepare(clients[side], hot[side], tip[side])));
      return measure(pids[side], async () => {
        const t0 = performance.now();
        const results = await Promise.all(bodies.map((body) => clients[side].post(`/api/entities/${hot[side]}/versions/confirm`, body)));
        const ms = performance.now() - t0;
        const created = results.filter((r) => r.status === 201);
        const stale = results.filter((r) => r.status === 409);
        if (created.length === 1) tip[side] = (JSON.parse(created[0]!.body.toString()) as { version: { id: string } }).version.id;
        return { rps: (racers / ms) * 1000, requests: racers, p99: ms, errors: created.length === 1 && stale.length === racers - 1 ? 0 : 1 };
      });
    });
  }

  log("");
  log(`| operation | A req/s | B req/s | B / A | A CPU µs/req | B CPU µs/req | A p99 ms | B p99 ms | A RSS MB | B RSS MB |`);
  log(`|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|`);
  for (const { op, a: ra, b: rb } of table) {
    const m = (rs: Result[], k: keyof Result) => median(rs.map((r) => r[k]));
    log(`| ${op} | ${m(ra, "rps").toFixed(0)} | ${m(rb, "rps").toFixed(0)} | ${(m(rb, "rps") / m(ra, "rps")).toFixed(2)} | ${m(ra, "cpuPerRequestUs").toFixed(0)} | ${m(rb, "cpuPerRequestUs").toFixed(0)} | ${m(ra, "p99").toFixed(1)} | ${m(rb, "p99").toFixed(1)} | ${Math.max(...ra.map((r) => r.rssMb)).toFixed(0)} | ${Math.max(...rb.map((r) => r.rssMb)).toFixed(0)} |`);
  }
  log(`(B: ${label}; medians of ${runs} runs each, taken in turn; ${os.cpus().length} cores, ${os.cpus()[0]?.model ?? "?"})`);
  clients.a.close();
  clients.b.close();
  for (const child of children) child.kill("SIGTERM");
  await azurite.stop();
  await admin.raw(`DROP DATABASE IF EXISTS \`${dbName}\``).finally(() => admin.destroy());
}

main().catch((error: unknown) => {
  for (const child of children) child.kill("SIGKILL");
  process.stderr.write(`bench:ab failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});

// npm run bench [-- --smoke] [--runs N] [--duration SECONDS] [--out FILE]
//
// Starts the service (src/main.ts) on MariaDB and Azurite, and next to it a
// minimal Fastify + mysql2 route running the same single-row SELECT (the
// ceiling of this stack); seeds entities and versions through the API; then
// loads every read and write over REST (HTTP/1.1 keep-alive, undici) and
// gRPC (@grpc/grpc-js). Reports requests per second, p50/p95/p99, errors and
// the service's CPU and peak RSS, as medians of several time-bounded runs,
// and writes them to BENCHMARKS.md (--smoke: a quick check that it all
// works, written nowhere unless --out is given).
import { defaultPageMaxBytes } from "../src/config.js";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { BlobServiceClient, ContainerSASPermissions, generateBlobSASQueryParameters, StorageSharedKeyCredential } from "@azure/storage-blob";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import knexFactory from "knex";
import { Pool } from "undici";
import { azuriteAccount, azuriteKey, startEmbeddedAzurite } from "../src/blob/embedded-azurite.js";
import { LeanHttp1 } from "./lean-http1.js";
import { mintToken } from "../src/auth/tokens.js";
import { fromJson, type JsonObject, toBinary } from "@bufbuild/protobuf";
import { EntityVersionsService } from "../gen/entityversions/v1/entity_versions_pb.js";
import type { Sql } from "../src/store/sql.js";
import { activeVersionSql, pushFactsSql, versionPageSql, versionWithFactsSql } from "../src/store/version-queries.js";
import { closedLoop, h2load, h2loadAvailable, type LoadResult, median, runBatch } from "./load.js";
import { cpuSeconds, machineBusySeconds, measured, memory, pidOf } from "./proc.js";
import { openIdleWatchers } from "../test/support/watch-client.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: args } = parseArgs({
  options: {
    smoke: { type: "boolean", default: false },
    runs: { type: "string" },
    duration: { type: "string" },
    out: { type: "string" },
    profile: { type: "string" },
    only: { type: "string" },
    entities: { type: "string" },
    generator: { type: "string" },
    "service-log": { type: "string" },
  },
});
const smoke = args.smoke === true;
const cfg = {
  entities: Number(args.entities ?? (smoke ? 20 : 300)),
  versionsPerEntity: smoke ? 2 : 3,
  runs: Number(args.runs ?? (smoke ? 1 : 3)),
  durationMs: Number(args.duration ?? (smoke ? 0.5 : 5)) * 1000,
  warmupMs: smoke ? 200 : 1000,
  concurrency: 32,
  // Azurite's in-memory store slows down as blobs accumulate (a HEAD: about
  // 600/s with 2,000 blobs, 140/s with 8,000), so each confirm run's
  // versions are deleted again and the blob count stays near 1,000-2,000.
  confirms: smoke ? 100 : 1000,
  hotRounds: smoke ? 1 : 5,
  racers: 100,
  idleWatchers: 100,
};
const out = args.out ?? (smoke ? undefined : path.join(root, "BENCHMARKS.md"));
const mysqlUrl = process.env["BENCH_MYSQL_URL"] ?? "mysql://root:@127.0.0.1:3306";
const secret = "bench-secret-0123456789abcdef0123456789";
const log = (line: string) => process.stdout.write(`${line}\n`);
// --generator h2load|js: what loads the reads. h2load (Debian's
// nghttp2-client) when installed: written in C, it leaves the two cores to
// the service and the database; the JavaScript clients otherwise, and
// always for the writes (each needs a body of its own).
const generator = args.generator ?? (h2loadAvailable() ? "h2load" : "js");
if (generator !== "h2load" && generator !== "js") throw new Error("--generator is h2load or js");
// The service runs with the Node flags of `npm run start:prod`, read from
// package.json so the two cannot drift (BENCH_SERVICE_NODE_FLAGS overrides,
// to compare flags).
const startProd = (JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts["start:prod"] ?? "";
const serviceNodeFlags = process.env["BENCH_SERVICE_NODE_FLAGS"] ?? /^(?:exec )?node (.*?) ?dist\/src\/main\.js$/.exec(startProd)?.[1] ?? "";

function waitForLine(child: ChildProcess, pattern: RegExp, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let outText = "";
    const timer = setTimeout(() => reject(new Error(`${what} did not start: ${outText.slice(-2000)}`)), 60_000);
    const onData = (chunk: Buffer) => {
      outText += chunk.toString();
      const m = pattern.exec(outText);
      if (m !== null) {
        clearTimeout(timer);
        child.stdout?.off("data", onData);
        child.stdout?.resume();
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", (c: Buffer) => (outText += c.toString()));
    child.once("exit", (code) => reject(new Error(`${what} exited with ${code}: ${outText.slice(-2000)}`)));
  });
}

const children: ChildProcess[] = [];
// --profile DIR: the service and the baseline each write a V8 CPU profile
// there when they exit, to compare where their time goes.
const profileFlags = (name: string) =>
  args.profile === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${args.profile}`, `--cpu-prof-name=${name}.cpuprofile`];
// The service and the baseline run compiled (npm run build), as in production.
function start(script: string, env: Record<string, string>, nodeArgs: string[] = []): ChildProcess {
  const child = spawn(process.execPath, [...nodeArgs, path.join(root, "dist", script.replace(/\.ts$/, ".js"))], { cwd: root, env: { PATH: process.env["PATH"] ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  return child;
}

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
let versionCounter = 0;
const nextVersion = () => {
  const d = new Date(Date.UTC(2030, 0, 1) + versionCounter++ * 1000);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getUTCFullYear()}.${p(d.getUTCMonth() + 1)}.${p(d.getUTCDate())}-${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}`;
};

async function main() {
  log("building …");
  execFileSync(path.join(root, "node_modules/.bin/tsc"), ["-p", root], { stdio: "inherit" });
  const dbName = `ev_bench_${process.pid}`;
  const admin = knexFactory({ client: "mysql2", connection: `${mysqlUrl}/mysql`, pool: { min: 0, max: 1 } });
  await admin.raw(`DROP DATABASE IF EXISTS \`${dbName}\``);
  await admin.raw(`CREATE DATABASE \`${dbName}\` CHARACTER SET utf8mb4`);
  const databaseUrl = `${mysqlUrl}/${dbName}`;
  const azurite = await startEmbeddedAzurite({});
  const env = {
    HOST: "127.0.0.1",
    PORT: "0",
    DATABASE_URL: databaseUrl,
    DATABASE_POOL_MAX: process.env["DATABASE_POOL_MAX"] ?? "10",
    // Unset: the service's own default.
    ...(process.env["DATABASE_READ_BATCH_MAX"] === undefined ? {} : { DATABASE_READ_BATCH_MAX: process.env["DATABASE_READ_BATCH_MAX"] }),
    ...(process.env["DATABASE_CONFIRM_GROUP_MAX"] === undefined ? {} : { DATABASE_CONFIRM_GROUP_MAX: process.env["DATABASE_CONFIRM_GROUP_MAX"] }),
    AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString,
    AZURE_STORAGE_CONTAINER: "bench",
    AUTH_JWT_SECRET: secret,
    PAGE_TOKEN_SECRET: secret,
    DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "ev-bench-")),
    LOG_LEVEL: "info",
    // Production's settings, but NODE_ENV=test: production refuses the
    // storage emulator's public key, and runs no differently otherwise.
    NODE_ENV: "test",
    AUTH_MAX_TOKEN_LIFETIME: "86400",
  };
  const service = start("src/main.ts", env, [
    ...serviceNodeFlags.split(" ").filter((f) => f !== ""),
    ...profileFlags("service"),
  ]);
  const serviceUrl = await waitForLine(service, /entity-versions listening on (http:\/\/[^\s"]+)/, "the service");
  const baseline = start("bench/baseline-server.ts", { DATABASE_URL: databaseUrl, DATABASE_POOL_MAX: env.DATABASE_POOL_MAX }, profileFlags("baseline"));
  const baselineUrl = await waitForLine(baseline, /baseline listening on (http:\/\/\S+)/, "the baseline");
  service.stdout!.resume();
  // --service-log FILE: the service's warnings and errors (pino levels 40
  // and up), to see what an error row's answers came from.
  if (args["service-log"] !== undefined) {
    const logFile = fs.createWriteStream(args["service-log"]);
    service.stdout!.on("data", (chunk: Buffer) => {
      for (const line of chunk.toString().split("\n")) if (/"level":(4|5|6)0/.test(line)) logFile.write(`${line}\n`);
    });
  }
  const pid = service.pid!;
  const token = await mintToken(secret, { sub: "bench", roles: ["publisher"], ttlSeconds: 3600 });
  const auth = { authorization: `Bearer ${token}` };
  const rest = new Pool(serviceUrl, { connections: cfg.concurrency * 2, keepAliveTimeout: 60_000 });
  const baseRest = new Pool(baselineUrl, { connections: cfg.concurrency * 2, keepAliveTimeout: 60_000 });
  const azure = new Pool(new URL(azurite.blobEndpoint).origin, { connections: 64 });

  const json = async (method: string, p: string, body?: unknown, pool = rest) => {
    const res = await pool.request({ method: method as "GET", path: p, headers: { ...auth, ...(body === undefined ? {} : { "content-type": "application/json" }) }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.statusCode, body: (await res.body.json()) as any };
  };
  const put = async (url: string, content: string, headers: Record<string, string>) => {
    const u = new URL(url);
    const res = await azure.request({ method: "PUT", path: `${u.pathname}${u.search}`, headers, body: content });
    await res.body.dump();
    return res.statusCode;
  };
  const prepare = async (entity: string, base: string | undefined) => {
    const version = nextVersion();
    const hash = sha(`${entity}/${version}/${randomBytes(4).toString("hex")}`);
    const up = await json("POST", `/api/entities/${entity}/versions/upload-url`, { version, source_hash: hash, ...(base ? { base_version_id: base } : {}) });
    if (up.status !== 200) throw new Error(`upload-url ${up.status} ${JSON.stringify(up.body)}`);
    const content = `package ${entity} ${version}`;
    if ((await put(up.body.upload_url, content, up.body.upload_headers)) !== 201) throw new Error("PUT failed");
    return { storage_path: up.body.storage_path, version, source_hash: hash, file_size_bytes: Buffer.byteLength(content), ...(base ? { base_version_id: base } : {}) };
  };

  // Seed: entities with a few versions each, the last one active.
  log(`seeding ${cfg.entities} entities × ${cfg.versionsPerEntity} versions …`);
  const entities = Array.from({ length: cfg.entities }, (_, i) => `bench-${i}`);
  const tips = new Map<string, string>();
  const seedOne = async (e: string) => {
    let base: string | undefined;
    for (let v = 0; v < cfg.versionsPerEntity; v++) {
      const c = await json("POST", `/api/entities/${e}/versions/confirm`, { ...(await prepare(e, base)), set_as_active: v === cfg.versionsPerEntity - 1 });
      if (c.status !== 201) throw new Error(`seed confirm ${c.status} ${JSON.stringify(c.body)}`);
      base = c.body.version.id;
    }
    tips.set(e, base!);
  };
  await runBatch(entities.map((e) => () => seedOne(e).then(() => true as const)), 16);
  const pick = (n: number) => entities[(n * 7919) % entities.length]!;

  // gRPC client from the proto, as another team would generate it.
  const definition = protoLoader.loadSync(["entityversions/v1/entity_versions.proto"], {
    includeDirs: [path.join(root, "proto"), path.join(root, "node_modules/google-proto-files")],
    keepCase: true,
    longs: Number,
    defaults: true,
  });
  const Versions = (grpc.loadPackageDefinition(definition) as any).entityversions.v1.EntityVersionsService as grpc.ServiceClientConstructor;
  const grpcClient = new Versions(serviceUrl.replace("http://", ""), grpc.credentials.createInsecure()) as grpc.Client & Record<string, Function>;
  const md = new grpc.Metadata();
  md.set("authorization", auth.authorization);
  const grpcCall = (method: string, req: object) =>
    new Promise<true | string>((resolve) => grpcClient[method]!.call(grpcClient, req, md, (err: grpc.ServiceError | null) => resolve(err === null ? true : `${err.code} ${err.details}`)));
  const restCall = (method: string, p: (n: number) => string, body?: (n: number) => unknown, pool = rest, expect = 200) => async (_w: number, n: number): Promise<true | string> => {
    const b = body?.(n);
    const res = await pool.request({ method: method as "GET", path: p(n), headers: { ...auth, ...(b === undefined ? {} : { "content-type": "application/json" }) }, ...(b === undefined ? {} : { body: JSON.stringify(b) }) });
    const text = await res.body.text();
    return res.statusCode === expect ? true : `${res.statusCode} ${text.slice(0, 100)}`;
  };

  /** One call of the JavaScript closed loop. */
  type Load = (w: number, n: number) => Promise<true | string>;
  /** A whole load run made elsewhere (h2load). */
  interface Runner {
    run(): Promise<LoadResult>;
  }
  // The same reads through h2load: REST cycles through every entity's URL;
  // gRPC sends one request (h2load takes one body), so it reads one entity.
  const h2 = (h1: boolean, urls: string[], body?: Uint8Array): Runner => ({
    run: () =>
      h2load({
        urls,
        h1,
        headers: { ...auth, ...(body === undefined ? {} : { "content-type": "application/grpc", te: "trailers" }) },
        ...(body === undefined ? {} : { body }),
        expectStatus: 200,
        concurrency: cfg.concurrency,
        warmupMs: cfg.warmupMs,
        durationMs: cfg.durationMs,
      }),
  });
  const restLoad = (base: string, p: (n: number) => string, pool = rest) =>
    generator === "h2load" ? h2(true, entities.map((_, n) => `${base}${p(n)}`)) : restCall("GET", p, undefined, pool);
  // gRPC errors ride in trailers h2load does not read: count them from the
  // service's metrics, before and after.
  const failureCodes = new Set<string>();
  const grpcFailures = async (method: string) => {
    const text = await (await rest.request({ method: "GET", path: "/metrics" })).body.text();
    let n = 0;
    failureCodes.clear();
    for (const m of text.matchAll(/^entity_versions_rpc_requests_total\{([^}]*)\} (\d+)/gm)) {
      // A call the client canceled is h2load ending its run, not the service failing.
      if (m[1]!.includes(`/${method}"`) && m[1]!.includes('protocol="grpc"') && !/code="(ok|canceled)"/.test(m[1]!)) {
        n += Number(m[2]);
        failureCodes.add(/code="([^"]*)"/.exec(m[1]!)?.[1] ?? "?");
      }
    }
    return n;
  };
  const grpcLoad = (method: string, req: (n: number) => object): Load | Runner => {
    if (generator !== "h2load") return (_w: number, n: number) => grpcCall(method, req(n));
    const desc = EntityVersionsService.methods.find((m) => m.name === method)!;
    const message = toBinary(desc.input, fromJson(desc.input, req(0) as JsonObject));
    const framed = new Uint8Array(5 + message.length);
    new DataView(framed.buffer).setUint32(1, message.length);
    framed.set(message, 5);
    const load = h2(false, [`${serviceUrl}/${EntityVersionsService.typeName}/${method}`], framed);
    return {
      run: async () => {
        const before = await grpcFailures(method);
        const result = await load.run();
        const failed = (await grpcFailures(method)) - before;
        return { ...result, errors: result.errors + failed, samples: failed > 0 ? [...result.samples, `${failed} gRPC errors (${[...failureCodes].join(", ")})`] : result.samples };
      },
    };
  };

  interface Row {
    name: string;
    protocol: string;
    runs: Array<{ load: LoadResult; cpuCores: number; rssMb: number }>;
    ratio?: number;
    /** Reads per batched statement (a read row) or confirms per transaction (the confirm row), from the service's metrics. */
    together?: number;
  }
  const rows: Row[] = [];
  // --only REGEX: run just the operations whose "name protocol" matches (and the baseline).
  const only = args.only === undefined ? undefined : new RegExp(args.only);
  const wanted = (name: string, protocol = "REST") => only === undefined || name.startsWith("baseline") || only.test(`${name} ${protocol}`);
  // The service's read batches so far: reads and the statements they went in.
  const batchStats = async () => {
    const text = await (await fetch(`${serviceUrl}/metrics`)).text();
    const read = (name: string) => Number(new RegExp(`^entity_versions_db_read_batch_size_${name} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
    return { reads: read("sum"), statements: read("count") };
  };
  // The service's confirm groups so far: groups, and confirms they recorded.
  const groupStats = async () => {
    const text = await (await fetch(`${serviceUrl}/metrics`)).text();
    const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
    return { groups: read("entity_versions_db_confirm_group_size_count"), grouped: read("entity_versions_db_confirms_grouped_total") };
  };
  /** One operation to load: a row of the table. */
  interface Op {
    name: string;
    protocol: string;
    call: Load | Runner;
    procPid?: number;
    rate?: number;
  }
  // Rows measured run by run in turn (op 1 run 1, op 2 run 1, …, op 1 run 2,
  // …), so that ops compared with each other see the same drift of the
  // machine; a row's "together" counts only its own runs' batches.
  const runOps = async (ops: Op[]): Promise<Row[]> => {
    const all = ops.map((op) => ({ op, procPid: op.procPid ?? pid, row: { name: op.name, protocol: op.protocol, runs: [] } as Row, reads: 0, statements: 0 }));
    const live = all.filter((x) => wanted(x.op.name, x.op.protocol));
    for (let r = 0; r < cfg.runs; r++) {
      for (const x of live) {
        const { call, rate } = x.op;
        const batches0 = x.procPid === pid ? await batchStats() : undefined;
        // A paced row counts the pacer's own pauses against the service: collect
        // this process's garbage first (npm run bench passes --expose-gc), so
        // that a full collection of its heap does not land inside the row.
        if (rate !== undefined) (globalThis as { gc?: () => void }).gc?.();
        const m = await measured(x.procPid, () =>
          typeof call !== "function"
            ? call.run()
            : closedLoop({ concurrency: cfg.concurrency, warmupMs: cfg.warmupMs, durationMs: cfg.durationMs, call, ...(rate === undefined ? {} : { rate }) }),
        );
        x.row.runs.push({ load: m.result, cpuCores: m.cpuCores, rssMb: m.rssMb });
        if (batches0 !== undefined) {
          const batches1 = await batchStats();
          x.reads += batches1.reads - batches0.reads;
          x.statements += batches1.statements - batches0.statements;
        }
      }
    }
    for (const x of live) {
      const { row } = x;
      if (x.statements > 0) row.together = x.reads / x.statements;
      rows.push(row);
      if (row.runs.length === 0) continue;
      const med = median(row.runs.map((y) => y.load.rps));
      log(`${row.name.padEnd(34)} ${row.protocol.padEnd(9)} ${med.toFixed(0).padStart(7)} req/s  p99 ${median(row.runs.map((y) => y.load.p99)).toFixed(2)} ms  errors ${row.runs.reduce((acc, y) => acc + y.load.errors, 0)}${row.runs[0]!.load.samples[0] ? `  e.g. ${row.runs[0]!.load.samples[0]}` : ""}`);
    }
    return all.map((x) => x.row);
  };
  const runOp = async (name: string, protocol: string, call: Load | Runner, procPid = pid, rate?: number): Promise<Row> =>
    (await runOps([{ name, protocol, call, procPid, ...(rate === undefined ? {} : { rate }) }]))[0]!;

  log("loading …");
  // The targets' rows, in turn with the baseline they are compared with.
  const [baselineRow] = await runOps([
    { name: "baseline: the same SELECT, Fastify + mysql2", protocol: "REST", call: restLoad(baselineUrl, (n) => `/baseline/${pick(n)}/active-version`, baseRest), procPid: baseline.pid! },
    { name: "GetActiveVersion", protocol: "REST", call: restLoad(serviceUrl, (n) => `/api/entities/${pick(n)}/active-version`) },
    { name: "GetActiveVersion", protocol: "gRPC", call: grpcLoad("GetActiveVersion", (n) => ({ entity_id: pick(n) })) },
  ]);
  const baselineRps = median(baselineRow!.runs.map((x) => x.load.rps));
  for (const row of rows) if (row.name === "GetActiveVersion") row.ratio = median(row.runs.map((x) => x.load.rps)) / baselineRps;
  const reads: Array<[string, (n: number) => string, string, (n: number) => object]> = [
    ["GetVersion", (n) => `/api/entities/${pick(n)}/versions/${tips.get(pick(n))}`, "GetVersion", (n) => ({ entity_id: pick(n), version_id: tips.get(pick(n)) })],
    ["ListVersions (page of 10)", (n) => `/api/entities/${pick(n)}/versions?page_size=10`, "ListVersions", (n) => ({ entity_id: pick(n), page_size: 10 })],
    ["GetDownloadUrl", (n) => `/api/entities/${pick(n)}/versions/${tips.get(pick(n))}/download`, "GetDownloadUrl", (n) => ({ entity_id: pick(n), version_id: tips.get(pick(n)) })],
  ];
  for (const [name, restPath, method, grpcReq] of reads) {
    const r = await runOp(name, "REST", restLoad(serviceUrl, restPath));
    r.ratio = median(r.runs.map((x) => x.load.rps)) / baselineRps;
    const g = await runOp(name, "gRPC", grpcLoad(method, grpcReq));
    g.ratio = median(g.runs.map((x) => x.load.rps)) / baselineRps;
  }
  const dbPid = pidOf("mariadbd") ?? pidOf("mysqld");
  // p99 at half the peak rate of GetActiveVersion, after the read rows and
  // on the same data as its peak row: before the writes, which leave MariaDB
  // flushing and purging in the background for a while.
  const activeRest = rows.find((x) => x.name === "GetActiveVersion" && x.protocol === "REST") ?? { name: "", protocol: "", runs: [] };
  const peak = activeRest.runs.length === 0 ? 2 : median(activeRest.runs.map((x) => x.load.rps));
  // Where the tail is made: the service's own latency histogram over this
  // row, and how long this process's event loop (the pacing generator's)
  // was held up, since a request it sends late counts from when it was due.
  const serviceBuckets = async () => {
    const text = await (await fetch(`${serviceUrl}/metrics`)).text();
    const re = /^entity_versions_rpc_duration_seconds_bucket\{le="([^"]+)",rpc="[^"]*\/GetActiveVersion",code="ok"\} (\d+)$/gm;
    const gc = (kind: string, what: "sum" | "count") => Number(new RegExp(`^entity_versions_nodejs_gc_duration_seconds_${what}\\{kind="${kind}"\\} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
    return {
      buckets: new Map([...text.matchAll(re)].map((m) => [m[1]!, Number(m[2])])),
      majorGc: { count: gc("major", "count"), sum: gc("major", "sum") },
    };
  };
  const scrapeBefore = await serviceBuckets();
  const bucketsBefore = scrapeBefore.buckets;
  const generatorLag = monitorEventLoopDelay({ resolution: 1 });
  generatorLag.enable();
  // The pacer runs ahead of the other processes when the system lets it
  // (root, or CAP_SYS_NICE): a request it sends or reads late counts against
  // the service, so its own waits for a core measure the machine, not the
  // service. It takes ~0.2 cores, so the service loses little to it.
  const priorityBefore = os.getPriority();
  let pacerPriority = priorityBefore;
  try {
    os.setPriority(-10);
    pacerPriority = -10;
  } catch {
    // Not permitted: paced at the same priority as the rest.
  }
  const generatorCpu0 = process.cpuUsage();
  const generatorT0 = performance.now();
  const dbCpu0 = dbPid === undefined ? Number.NaN : cpuSeconds(dbPid);
  const machine0 = machineBusySeconds();
  // Paced by a bare keep-alive client: undici's own CPU (~0.3 cores here)
  // was taken from the cores the service's tail is measured on.
  const lean = new LeanHttp1(serviceUrl, auth);
  const leanGet = (p: (n: number) => string) => async (_w: number, n: number): Promise<true | string> => {
    const res = await lean.get(p(n));
    return res.status === 200 ? true : `${res.status} ${res.body.toString().slice(0, 100)}`;
  };
  const half = await runOp("GetActiveVersion at half the peak rate", "REST", leanGet((n) => `/api/entities/${pick(n)}/active-version`), pid, Math.max(1, Math.floor(peak / 2)));
  lean.close();
  if (pacerPriority !== priorityBefore) {
    try {
      os.setPriority(priorityBefore);
    } catch {
      // Lowering it back needs no privilege; nothing to do if it fails.
    }
  }
  generatorLag.disable();
  const generatorCpu = process.cpuUsage(generatorCpu0);
  const halfSeconds = (performance.now() - generatorT0) / 1000;
  const generatorCores = (generatorCpu.user + generatorCpu.system) / 1e6 / halfSeconds;
  const halfDbCores = dbPid === undefined ? Number.NaN : (cpuSeconds(dbPid) - dbCpu0) / halfSeconds;
  const halfMachineBusy = (machineBusySeconds() - machine0) / halfSeconds / os.cpus().length;
  const halfP99 = median(half.runs.map((x) => x.load.p99));
  const scrapeAfter = await serviceBuckets();
  const bucketsAfter = scrapeAfter.buckets;
  const majorGcs = scrapeAfter.majorGc.count - scrapeBefore.majorGc.count;
  const majorGcMs = (scrapeAfter.majorGc.sum - scrapeBefore.majorGc.sum) * 1000;
  const inService = [...bucketsAfter].map(([le, n]) => [le, n - (bucketsBefore.get(le) ?? 0)] as const);
  const total = inService.find(([le]) => le === "+Inf")?.[1] ?? 0;
  // The smallest bucket bound holding 99% of the row's requests.
  const serviceP99Bound = inService.find(([, n]) => total > 0 && n >= 0.99 * total)?.[0];
  const halfTail =
    total === 0
      ? ""
      : ` Inside the service (its own \`entity_versions_rpc_duration_seconds\` histogram over that row), 99% of the requests took at most ${serviceP99Bound === "+Inf" ? "more than 10 s" : `${Number(serviceP99Bound) * 1000} ms`}; the pacing generator's own event loop, on the same two cores, was held up by ${(generatorLag.percentile(99) / 1e6).toFixed(1)} ms at the 99th percentile and ${(generatorLag.max / 1e6).toFixed(1)} ms at most, and took ${generatorCores.toFixed(2)} cores, ${pacerPriority === priorityBefore ? `at the same scheduling priority as the other processes (raising it, to nice ${-10}, was not permitted)` : `at scheduling priority nice ${pacerPriority} (the others at ${priorityBefore})`}. MariaDB took ${halfDbCores.toFixed(2)} cores, and the machine's cores were ${(halfMachineBusy * 100).toFixed(0)}% busy. The service ran ${majorGcs} full collections over the row, ${majorGcMs.toFixed(0)} ms of them in all.`;
  if (halfTail !== "") log(halfTail.trim());

  // The same targets with idle watchers connected (WatchEvents, half over
  // gRPC and half over REST, on entities the reads also hit): each holds a
  // stream and a place in the poller's query, so they must cost the reads
  // nothing while no event arrives. Several callers, since the service caps
  // watches per caller; admins, who may watch any entity.
  const watcherCallers = await Promise.all(
    Array.from({ length: 5 }, async (_, i) => ({
      authorization: `Bearer ${await mintToken(secret, { sub: `bench-watcher-${i}`, roles: ["admin"], ttlSeconds: 3600 })}`,
    })),
  );
  const idleWatchers = await Promise.all(
    (["grpc", "rest"] as const).flatMap((protocol) =>
      Array.from({ length: cfg.idleWatchers / 10 }, (_, i) =>
        openIdleWatchers({ url: serviceUrl, entityId: pick(i * 7 + (protocol === "rest" ? 3 : 0)), callers: watcherCallers, count: 5, protocol }),
      ),
    ),
  );
  const watchersOpen = idleWatchers.reduce((n, w) => n + w.watches.length, 0);
  log(`${watchersOpen} idle watchers connected`);
  const [watchBaselineRow] = await runOps([
    { name: `baseline, ${watchersOpen} idle watchers on the service`, protocol: "REST", call: restLoad(baselineUrl, (n) => `/baseline/${pick(n)}/active-version`, baseRest), procPid: baseline.pid! },
    { name: `GetActiveVersion, ${watchersOpen} idle watchers`, protocol: "REST", call: restLoad(serviceUrl, (n) => `/api/entities/${pick(n)}/active-version`) },
    { name: `GetActiveVersion, ${watchersOpen} idle watchers`, protocol: "gRPC", call: grpcLoad("GetActiveVersion", (n) => ({ entity_id: pick(n) })) },
  ]);
  const watchBaselineRps = median(watchBaselineRow!.runs.map((x) => x.load.rps));
  const watchedRows = rows.filter((x) => x.name === `GetActiveVersion, ${watchersOpen} idle watchers`);
  for (const row of watchedRows) row.ratio = median(row.runs.map((x) => x.load.rps)) / watchBaselineRps;
  const watchLean = new LeanHttp1(serviceUrl, auth);
  (globalThis as { gc?: () => void }).gc?.();
  const watchHalf = await runOp(`GetActiveVersion at half the peak rate, ${watchersOpen} idle watchers`, "REST", (_w, n) => watchLean.get(`/api/entities/${pick(n)}/active-version`).then((res) => (res.status === 200 ? true : `${res.status}`)), pid, Math.max(1, Math.floor(peak / 2)));
  watchLean.close();
  const watchHalfP99 = median(watchHalf.runs.map((x) => x.load.p99));
  // A watcher that ended while idle is a fault, not noise.
  const watchersEnded = idleWatchers.reduce((n, w) => n + w.watches.filter((x) => x.done).length, 0);
  for (const w of idleWatchers) w.close();

  const uploadBody = (n: number) => ({ version: nextVersion(), source_hash: sha(`upload-${n}-${Math.random()}`), base_version_id: tips.get(pick(n)) });
  await runOp("GetUploadUrl", "REST", restCall("POST", (n) => `/api/entities/${pick(n)}/versions/upload-url`, uploadBody));
  await runOp("GetUploadUrl", "gRPC", (_w, n) => grpcCall("GetUploadUrl", { entity_id: pick(n), ...uploadBody(n) }));

  // ConfirmUpload on distinct new entities, uploads done beforehand.
  const confirmRow: Row = { name: "ConfirmUpload, distinct entities", protocol: "REST", runs: [] };
  const azuriteRow: Row = { name: "ceiling: Azurite's work per confirm (HEAD, Copy Blob From URL, Delete)", protocol: "HTTP", runs: [] };
  const azuriteHeadRow: Row = { name: "ceiling: Azurite's HEAD alone (a confirm's work before versions were sealed)", protocol: "HTTP", runs: [] };
  const groups0 = wanted("ConfirmUpload") ? await groupStats() : undefined;
  // Where a confirm's CPU goes, machine-wide: the cores are shared by the
  // service, MariaDB, Azurite and this process, so their sum per confirm is
  // what bounds the rate.
  const containerReadSas = generateBlobSASQueryParameters(
    { containerName: "bench", permissions: ContainerSASPermissions.parse("r"), expiresOn: new Date(Date.now() + 3_600_000) },
    new StorageSharedKeyCredential(azuriteAccount, azuriteKey),
  ).toString();
  const confirmCpu: Array<{ service: number; db: number; azurite: number; generator: number; machine: number }> = [];
  let confirmsMade = 0;
  const leanConfirms = new LeanHttp1(serviceUrl, auth);
  for (let r = 0; r < (wanted("ConfirmUpload") ? cfg.runs : 0); r++) {
    const fresh = Array.from({ length: cfg.confirms }, (_, i) => `fresh-${r}-${i}-${randomBytes(3).toString("hex")}`);
    const bodies: object[] = [];
    await runBatch(fresh.map((e) => async () => (bodies.push({ e, body: await prepare(e, undefined) }), true as const)), 32);
    // Sent by the bare client (as the p99 row): undici took ~110 µs of this
    // process's CPU per confirm, on the cores the service is measured on.
    // Each version's own copy, as its confirm answered it: what the ceiling rows read.
    const sealed: string[] = [];
    const calls = (bodies as Array<{ e: string; body: object }>).map(({ e, body }) => {
      const text = JSON.stringify(body);
      return async (): Promise<true | string> => {
        const c = await leanConfirms.post(`/api/entities/${e}/versions/confirm`, text);
        if (c.status !== 201) return `${c.status} ${c.body.toString().slice(0, 100)}`;
        sealed.push((JSON.parse(c.body.toString()) as { version: { storage_path: string } }).version.storage_path);
        return true;
      };
    });
    const others0 = { db: dbPid === undefined ? Number.NaN : cpuSeconds(dbPid), azurite: azurite.pid === undefined ? Number.NaN : cpuSeconds(azurite.pid), bench: process.cpuUsage(), machine: machineBusySeconds() };
    const m = await measured(pid, () => runBatch(calls, cfg.concurrency));
    confirmCpu.push({
      service: (m.cpuCores * m.result.seconds) / calls.length,
      db: dbPid === undefined ? Number.NaN : (cpuSeconds(dbPid) - others0.db) / calls.length,
      azurite: azurite.pid === undefined ? Number.NaN : (cpuSeconds(azurite.pid) - others0.azurite) / calls.length,
      generator: (((u) => u.user + u.system)(process.cpuUsage(others0.bench)) / 1e6) / calls.length,
      machine: (machineBusySeconds() - others0.machine) / calls.length,
    });
    confirmsMade += calls.length;
    confirmRow.runs.push({ load: m.result, cpuCores: m.cpuCores, rssMb: m.rssMb });
    // The emulator's own bound at this blob count: the work a confirm asks
    // of it, on the packages just confirmed (as staged uploads would be):
    // a HEAD signed as the service signs its checks, a Copy Blob From URL to
    // a scratch name, and the delete of the copy.
    const container = BlobServiceClient.fromConnectionString(azurite.connectionString).getContainerClient("bench");
    const headsAlone = sealed.map((finalPath) => async (): Promise<true | string> => {
      const u = new URL(`${azurite.blobEndpoint}/bench/${finalPath}`);
      const res = await azure.request({ method: "HEAD", path: `${u.pathname}?${containerReadSas}` });
      await res.body.dump();
      return res.statusCode === 200 ? true : `HEAD ${res.statusCode}`;
    });
    azuriteHeadRow.runs.push({ load: await runBatch(headsAlone, cfg.concurrency), cpuCores: Number.NaN, rssMb: Number.NaN });
    const heads = sealed.map((finalPath) => async (): Promise<true | string> => {
      const u = new URL(`${azurite.blobEndpoint}/bench/${finalPath}`);
      const res = await azure.request({ method: "HEAD", path: `${u.pathname}?${containerReadSas}` });
      await res.body.dump();
      if (res.statusCode !== 200) return `HEAD ${res.statusCode}`;
      const scratch = container.getBlockBlobClient(`ceiling/${randomBytes(8).toString("hex")}`);
      await scratch.syncCopyFromURL(`${u.origin}${u.pathname}?${containerReadSas}`, { conditions: { ifNoneMatch: "*" } });
      await scratch.delete();
      return true;
    });
    azuriteRow.runs.push({ load: await runBatch(heads, cfg.concurrency), cpuCores: Number.NaN, rssMb: Number.NaN });
    // Keep the emulator small: delete this run's versions (and their blobs).
    await runBatch(
      (bodies as Array<{ e: string }>).map(({ e }) => async (): Promise<true | string> => {
        const list = await json("GET", `/api/entities/${e}/versions`);
        for (const v of list.body.versions ?? []) await json("DELETE", `/api/entities/${e}/versions/${v.id}`);
        return true;
      }),
      16,
    );
  }
  leanConfirms.close();
  if (groups0 !== undefined) {
    // Transactions: the groups, and every confirm recorded outside one.
    const groups1 = await groupStats();
    const grouped = groups1.grouped - groups0.grouped;
    confirmRow.together = confirmsMade / (groups1.groups - groups0.groups + confirmsMade - grouped);
  }
  rows.push(confirmRow);
  let confirmCpuNote = "";
  // The rate the rest of the machine's work per confirm allows, as if the
  // service's own cost nothing: the cores over what MariaDB, Azurite, the
  // load generator and the kernel spent per confirm.
  let dependencyBound = Number.NaN;
  if (confirmCpu.length > 0) {
    const us = (pick: (x: (typeof confirmCpu)[number]) => number) => median(confirmCpu.map(pick)) * 1e6;
    const [svcUs, dbUs, azUs, genUs, machineUs] = [us((x) => x.service), us((x) => x.db), us((x) => x.azurite), us((x) => x.generator), us((x) => x.machine)];
    const cores = os.cpus().length;
    confirmCpuNote =
      ` ConfirmUpload's CPU per confirm, machine-wide: ${svcUs.toFixed(0)} µs in the service, ${dbUs.toFixed(0)} µs in MariaDB, ${azUs.toFixed(0)} µs in Azurite, ${genUs.toFixed(0)} µs in the load generator;` +
      ` ${machineUs.toFixed(0)} µs of the machine's in all (the kernel's network work included), so its ${cores} cores allow at most ${((cores / machineUs) * 1e6).toFixed(0)} confirms a second at this cost,` +
      ` and ${((cores / (machineUs - svcUs)) * 1e6).toFixed(0)} a second were the service's own ${svcUs.toFixed(0)} µs free.`;
    dependencyBound = (cores / (machineUs - svcUs)) * 1e6;
    log(confirmCpuNote.trim());
  }

  // The database's own ceiling for confirm's transaction: the same seven
  // statements (begin, upsert and lock, read, claim, insert, move the tip,
  // commit) from a bare mysql2 pool, nothing else.
  let confirmBound = Number.NaN;
  const txCeilingRow: Row = { name: "ceiling: confirm's 7-statement transaction, bare mysql2", protocol: "SQL", runs: [] };
  if (wanted("ConfirmUpload")) {
    const mysql = (await import("mysql2/promise")).default;
    const raw = mysql.createPool({ uri: databaseUrl, connectionLimit: Number(env.DATABASE_POOL_MAX) });
    await raw.query("CREATE TABLE IF NOT EXISTS bench_tx_entities (id varchar(128) PRIMARY KEY, last_seq bigint NOT NULL, tip varchar(64)) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
    await raw.query("CREATE TABLE IF NOT EXISTS bench_tx_versions (id varchar(64) PRIMARY KEY, entity_id varchar(128) NOT NULL, seq bigint NOT NULL, KEY (entity_id)) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
    await raw.query("CREATE TABLE IF NOT EXISTS bench_tx_uploads (id varchar(64) PRIMARY KEY, state varchar(16) NOT NULL) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
    for (let r = 0; r < cfg.runs; r++) {
      const ids = Array.from({ length: cfg.confirms }, (_, i) => `tx-${r}-${i}-${randomBytes(4).toString("hex")}`);
      await raw.query("INSERT INTO bench_tx_uploads (id, state) VALUES ?", [ids.map((id) => [id, "issued"])]);
      const load = await runBatch(
        ids.map((id) => async (): Promise<true | string> => {
          const conn = await raw.getConnection();
          try {
            await conn.query("BEGIN");
            await conn.execute("INSERT INTO bench_tx_entities (id, last_seq) VALUES (?, 0) ON DUPLICATE KEY UPDATE id = id", [id]);
            await conn.execute("SELECT e.last_seq, (SELECT v.id FROM bench_tx_versions v WHERE v.entity_id = e.id LIMIT 1) AS d FROM bench_tx_entities e WHERE e.id = ?", [id]);
            await conn.execute("UPDATE bench_tx_uploads SET state = 'confirmed' WHERE id = ? AND state = 'issued'", [id]);
            await conn.execute("INSERT INTO bench_tx_versions (id, entity_id, seq) VALUES (?, ?, 1)", [id, id]);
            await conn.execute("UPDATE bench_tx_entities SET last_seq = 1, tip = ? WHERE id = ?", [id, id]);
            await conn.query("COMMIT");
            return true;
          } finally {
            conn.release();
          }
        }),
        cfg.concurrency,
      );
      txCeilingRow.runs.push({ load, cpuCores: Number.NaN, rssMb: Number.NaN });
    }
    await raw.end();
    rows.push(txCeilingRow, azuriteRow, azuriteHeadRow);
    // The bound is what the CPU accounting above leaves; without /proc, the
    // two ceilings (each measured with the machine to itself) together,
    // harmonically, as they share the cores.
    const tx = median(txCeilingRow.runs.map((x) => x.load.rps));
    const head = median(azuriteRow.runs.map((x) => x.load.rps));
    confirmBound = Number.isFinite(dependencyBound) ? dependencyBound : 1 / (1 / tx + 1 / head);
    confirmRow.ratio = median(confirmRow.runs.map((x) => x.load.rps)) / confirmBound;
    log(`${txCeilingRow.name}: ${tx.toFixed(0)} tx/s`);
    log(`${azuriteRow.name}: ${head.toFixed(0)}/s`);
    log(`${azuriteHeadRow.name}: ${median(azuriteHeadRow.runs.map((x) => x.load.rps)).toFixed(0)}/s`);
    log(`what the dependencies' work allows, before any of the service's own: ${confirmBound.toFixed(0)}/s`);
  }
  log(`ConfirmUpload, distinct entities  REST      ${median(confirmRow.runs.map((x) => x.load.rps)).toFixed(0).padStart(7)} req/s  p99 ${median(confirmRow.runs.map((x) => x.load.p99)).toFixed(2)} ms  errors ${confirmRow.runs.reduce((a, x) => a + x.load.errors, 0)}  confirms per transaction ${confirmRow.together?.toFixed(1) ?? "–"}${confirmRow.runs.flatMap((x) => x.load.samples).slice(0, 3).map((e) => `  e.g. ${e}`).join("")}`);

  // The hot entity: 100 concurrent confirms with one base.
  const hot = `hot-${randomBytes(3).toString("hex")}`;
  let hotBase = (await json("POST", `/api/entities/${hot}/versions/confirm`, await prepare(hot, undefined))).body.version.id as string;
  const settles: number[] = [];
  let hotOk = true;
  for (let round = 0; round < (wanted("hot entity") ? cfg.hotRounds : 0); round++) {
    const bodies = await Promise.all(Array.from({ length: cfg.racers }, () => prepare(hot, hotBase)));
    const t0 = performance.now();
    const results = await Promise.all(bodies.map((b) => json("POST", `/api/entities/${hot}/versions/confirm`, b)));
    settles.push(performance.now() - t0);
    const created = results.filter((x) => x.status === 201);
    const stale = results.filter((x) => x.status === 409 && x.body.code === "STALE_BASE");
    if (created.length !== 1 || stale.length !== cfg.racers - 1) hotOk = false;
    hotBase = created[0]?.body.version.id ?? hotBase;
  }
  log(`hot entity: ${cfg.racers} racers settled in ${median(settles).toFixed(0)} ms (median of ${cfg.hotRounds}); exactly 1 created each time: ${hotOk}`);

  // Flat read cost: the same random reads over a small data set and over
  // one a hundred times larger (seeded with SQL, not through the API, with
  // MariaDB's sequence tables), taken in turn.
  const largeRows: Row[] = [];
  const planLines: string[] = [];
  let largeRatio = Number.NaN;
  const sets = smoke ? { small: 100, large: 1_000 } : { small: 1_000, large: 100_000 };
  const perEntity = 10;
  if (wanted("large data")) {
    const db = knexFactory({ client: "mysql2", connection: databaseUrl, pool: { min: 0, max: 1 } });
    // A data set that does not fit the buffer pool measures the disk, not
    // the service: the pool is sized to it for this row, and put back after.
    const [[{ pool }]] = (await db.raw("select @@innodb_buffer_pool_size as pool")) as unknown as [[{ pool: number | string }]];
    const wantedPool = 1024 * 1024 * 1024;
    let restorePool: number | undefined;
    if (!smoke && Number(pool) < wantedPool) {
      try {
        await db.raw(`set global innodb_buffer_pool_size = ${wantedPool}`);
        restorePool = Number(pool);
      } catch (error) {
        log(`could not size the buffer pool (${(error as Error).message}): the large data set may not fit it`);
      }
    }
    log(`seeding ${sets.small * perEntity} and ${sets.large * perEntity} versions with SQL …`);
    for (const [prefix, count] of [["small", sets.small], ["large", sets.large]] as const) {
      await db.raw(
        `insert into entities (id, tip_version_id, active_version_id, last_seq, created_at, public_store) select concat('${prefix}-', seq), concat('${prefix}-', seq, '-v${perEntity}'), concat('${prefix}-', seq, '-v${perEntity / 2}'), ${perEntity}, now(3), 0 from seq_1_to_${count}`,
      );
      await db.raw(`insert into entity_publishers (entity_id, user_id) select concat('${prefix}-', seq), 'bench' from seq_1_to_${count}`);
      await db.raw(
        `insert into versions (id, entity_id, seq, version, source_hash, upload_id, storage_path, file_size_bytes, service_dependencies, published_by, created_at) ` +
          `select concat('${prefix}-', e.seq, '-v', v.seq), concat('${prefix}-', e.seq), v.seq, concat('2020.01.01-0000', lpad(v.seq, 2, '0')), sha2(concat('${prefix}', e.seq, '-', v.seq), 256), concat('${prefix}-', e.seq, '-u', v.seq), concat('versions/${prefix}-', e.seq, '/u', v.seq, '/package'), 100 + v.seq, '[]', 'bench', now(3) ` +
          `from seq_1_to_${count} e cross join seq_1_to_${perEntity} v`,
      );
    }
    await db.raw("analyze table entities, versions, entity_publishers");
    const randomEntity = (prefix: string, count: number) => `${prefix}-${1 + Math.floor(Math.random() * count)}`;
    const ops: Op[] = [];
    for (const [prefix, count] of [["small", sets.small], ["large", sets.large]] as const) {
      const label = `${(count * perEntity).toLocaleString("en")} versions`;
      ops.push(
        { name: `GetActiveVersion, large data: ${label}`, protocol: "REST", call: restCall("GET", () => `/api/entities/${randomEntity(prefix, count)}/active-version`) },
        {
          name: `GetVersion, large data: ${label}`,
          protocol: "REST",
          call: restCall("GET", () => {
            const e = randomEntity(prefix, count);
            return `/api/entities/${e}/versions/${e}-v${1 + Math.floor(Math.random() * perEntity)}`;
          }),
        },
        { name: `ListVersions, large data: ${label}`, protocol: "REST", call: restCall("GET", () => `/api/entities/${randomEntity(prefix, count)}/versions?page_size=5`) },
      );
    }
    largeRows.push(...(await runOps(ops)));
    const rpsOf = (r: Row) => median(r.runs.map((x) => x.load.rps));
    const ratios = [0, 1, 2].map((i) => rpsOf(largeRows[i + 3]!) / rpsOf(largeRows[i]!));
    largeRatio = Math.min(...ratios);
    for (const [i, r] of ratios.entries()) largeRows[i + 3]!.ratio = r;
    // The hot statements' plans on the large data set, as MariaDB ran them.
    const caller = { id: "bench", roles: ["publisher"], orgs: ["org-a"] };
    const e = `large-${Math.ceil(sets.large / 2)}`;
    const statements: Array<[string, Sql]> = [
      ["GetActiveVersion", activeVersionSql(e, caller)],
      ["GetVersion, GetDownloadUrl", versionWithFactsSql(e, `${e}-v3`, caller)],
      ["ListVersions, first page", versionPageSql(e, undefined, 50, caller, defaultPageMaxBytes, "mysql")],
      ["ListVersions, a later page", versionPageSql(e, 4, 50, caller, defaultPageMaxBytes, "mysql")],
      [
        "a push's facts (GetUploadUrl, ConfirmUpload)",
        pushFactsSql({ entityId: e, sourceHash: "a".repeat(64), version: "2030.01.01-000000", baseVersionId: `${e}-v${perEntity}`, force: false, setAsActive: false, caller, authorize: () => "allow", uploadId: "none" }),
      ],
    ];
    for (const [what, q] of statements) {
      const [plan] = (await db.raw(`analyze ${q.text}`, q.params as never)) as unknown as [Array<Record<string, unknown>>];
      planLines.push(`**${what}**`, "", "| id | select_type | table | type | key | rows | r_rows | Extra |", "|---|---|---|---|---|---:|---:|---|");
      for (const r of plan) planLines.push(`| ${r["id"] ?? ""} | ${r["select_type"] ?? ""} | ${r["table"] ?? ""} | ${r["type"] ?? ""} | ${r["key"] ?? ""} | ${r["rows"] ?? ""} | ${r["r_rows"] ?? ""} | ${r["Extra"] ?? ""} |`);
      planLines.push("");
    }
    await db.raw(`delete from versions where entity_id like 'small-%' or entity_id like 'large-%'`);
    await db.raw(`delete from entity_publishers where entity_id like 'small-%' or entity_id like 'large-%'`);
    await db.raw(`delete from entities where id like 'small-%' or id like 'large-%'`);
    if (restorePool !== undefined) await db.raw(`set global innodb_buffer_pool_size = ${restorePool}`).catch(() => undefined);
    await db.destroy();
  }

  const peakRss = memory(pid).peakMb;

  // Where the service's memory is, for the report.
  const metricsText = await (await fetch(`${serviceUrl}/metrics`)).text();
  const memoryLines = metricsText
    .split("\n")
    .filter((l) => /^entity_versions_(nodejs_heap_space_size_(total|used)_bytes|nodejs_external_memory_bytes|process_resident_memory_bytes)/.test(l))
    .map((l) => l.replace(/^entity_versions_/, "").replace(/ (\d+(\.\d+)?(e\+\d+)?)$/, (_m, n: string) => ` ${(Number(n) / 1048576).toFixed(1)} MB`));
  if (process.env["BENCH_SHOW_MEMORY"] !== undefined) for (const l of memoryLines) log(l);
  grpcClient.close();
  await Promise.all([rest.close(), baseRest.close(), azure.close()]);
  // Graceful stop, waited for: a --profile is written on exit.
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null) return resolve();
          const timer = setTimeout(() => {
            log(`a child process did not stop within 15 s of SIGTERM: killed`);
            child.kill("SIGKILL");
            resolve();
          }, 15_000);
          child.once("exit", () => (clearTimeout(timer), resolve()));
          child.kill("SIGTERM");
        }),
    ),
  );
  await azurite.stop();
  await admin.raw(`DROP DATABASE IF EXISTS \`${dbName}\``).finally(() => admin.destroy());

  const errors = rows.reduce((a, r) => a + r.runs.reduce((b, x) => b + x.load.errors, 0), 0);
  const activeGrpc = rows.find((x) => x.name === "GetActiveVersion" && x.protocol === "gRPC") ?? { ratio: 0 };
  const confirmRps = median(confirmRow.runs.map((x) => x.load.rps));
  const targets: Array<[string, boolean, string]> = [
    ["GetActiveVersion REST ≥ 0.8× baseline", (activeRest.ratio ?? 0) >= 0.8, `${(activeRest.ratio ?? 0).toFixed(2)}×`],
    ["GetActiveVersion gRPC ≥ 0.8× baseline", (activeGrpc.ratio ?? 0) >= 0.8, `${(activeGrpc.ratio ?? 0).toFixed(2)}×`],
    ["ConfirmUpload, distinct entities ≥ 1,000/s", confirmRps >= 1000, `${confirmRps.toFixed(0)}/s (its dependencies' work per confirm leaves room for ${confirmBound.toFixed(0)}/s on these cores)`],
    ["100 racers on one entity settled < 500 ms, exactly 1 created", hotOk && median(settles) < 500, `${median(settles).toFixed(0)} ms`],
    ["p99 < 25 ms at half the peak rate", halfP99 < 25, `${halfP99.toFixed(2)} ms at ${Math.floor(peak / 2)}/s`],
    [
      `GetActiveVersion with ${watchersOpen} idle watchers connected: REST and gRPC ≥ 0.8× baseline, p99 < 25 ms at half the peak rate, no watcher ended`,
      watchedRows.every((r) => (r.ratio ?? 0) >= 0.8) && watchHalfP99 < 25 && watchersEnded === 0,
      `${watchedRows.map((r) => `${r.protocol} ${(r.ratio ?? 0).toFixed(2)}×`).join(", ")}, p99 ${watchHalfP99.toFixed(2)} ms, ${watchersEnded} ended`,
    ],
    ["peak RSS < 200 MB", peakRss < 200, `${peakRss.toFixed(0)} MB`],
    [
      `random reads over ${(sets.large * perEntity).toLocaleString("en")} versions ≥ 0.8× of the same over ${(sets.small * perEntity).toLocaleString("en")}`,
      largeRatio >= 0.8,
      `${Number.isFinite(largeRatio) ? largeRatio.toFixed(2) : "–"}× (the lowest of GetActiveVersion, GetVersion and ListVersions)`,
    ],
  ];
  for (const [what, ok, value] of targets) log(`${ok ? "MET   " : "MISSED"} ${what}: ${value}`);
  if (out !== undefined) fs.writeFileSync(out, report(rows, targets, settles, hotOk, peakRss, baselineRps, confirmBound, planLines, `At half the peak rate: p99 ${halfP99.toFixed(2)} ms, as the generator measured it (from when each request was due).${halfTail}${confirmCpuNote === "" ? "" : `\n${confirmCpuNote.trim()}`}`));
  if (out !== undefined) log(`wrote ${path.relative(process.cwd(), out)}`);
  if (errors > 0 || !hotOk) {
    log(`FAILED: ${errors} errors${hotOk ? "" : "; the hot entity did not settle to exactly 1 created"}`);
    process.exitCode = 1;
  }
}

function report(
  rows: Array<{ name: string; protocol: string; ratio?: number; together?: number; runs: Array<{ load: LoadResult; cpuCores: number; rssMb: number }> }>,
  targets: Array<[string, boolean, string]>,
  settles: number[],
  hotOk: boolean,
  peakRss: number,
  baselineRps: number,
  confirmBound: number,
  planLines: string[],
  halfNote: string,
): string {
  const cpu = os.cpus();
  const version = (cmd: string, argv: string[]) => {
    try {
      return execFileSync(cmd, argv, { encoding: "utf8" }).trim().split("\n")[0];
    } catch {
      return "unknown";
    }
  };
  const pkg = (name: string) => JSON.parse(fs.readFileSync(path.join(root, "node_modules", name, "package.json"), "utf8")).version as string;
  const f = (n: number, d = 0) => (Number.isFinite(n) ? n.toFixed(d) : "–");
  const lines = [
    "# Benchmarks",
    "",
    "Produced by `npm run bench` (code in `bench/`); rerun it to refresh this file. Every figure is the median of",
    `${cfg.runs} runs of ${cfg.durationMs / 1000} s after ${cfg.warmupMs / 1000} s of warm-up, ${cfg.concurrency} requests in flight, load generated on the same machine.`,
    "",
    `- Machine: ${cpu[0]?.model ?? "?"}, ${cpu.length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; ${os.type()} ${os.release()}`,
    `- Node ${process.version}; ${version("mariadbd", ["--version"]) ?? ""}`,
    `- fastify ${pkg("fastify")}, @connectrpc/connect ${pkg("@connectrpc/connect")}, @bufbuild/protobuf ${pkg("@bufbuild/protobuf")}, knex ${pkg("knex")}, mysql2 ${pkg("mysql2")}, @grpc/grpc-js ${pkg("@grpc/grpc-js")} (client), undici ${pkg("undici")} (client), azurite ${pkg("azurite")}`,
    generator === "h2load"
      ? `- Load: the reads and the baseline by ${version("h2load", ["--version"])} (REST: ${cfg.concurrency} HTTP/1.1 keep-alive connections; gRPC: ${cfg.concurrency} streams on one HTTP/2 connection, as one grpc-js channel makes); the other writes by undici and @grpc/grpc-js, which send a body of their own per request; ConfirmUpload and the fixed-rate row by a bare keep-alive HTTP/1.1 client (\`bench/lean-http1.ts\`, up to ${cfg.concurrency} connections) in this process`
      : "- Load: every operation by undici (REST) and @grpc/grpc-js (gRPC), ConfirmUpload and the fixed-rate row by a bare keep-alive HTTP/1.1 client (`bench/lean-http1.ts`); install h2load (`apt-get install nghttp2-client`) to take the reads' load generator off the service's cores",
    `- Data: ${cfg.entities} entities × ${cfg.versionsPerEntity} versions; ${generator === "h2load" ? "REST reads cycle through the entities, gRPC reads read one (h2load sends one request body)" : "reads cycle through the entities"}; the service runs compiled (\`node ${serviceNodeFlags} dist/src/main.js\`, as \`npm run start:prod\`) with production's settings (NODE_ENV=test, since production refuses Azurite's public key), LOG_LEVEL=info (one log line per request), DATABASE_POOL_MAX=${process.env["DATABASE_POOL_MAX"] ?? "10"}, DATABASE_READ_BATCH_MAX=${process.env["DATABASE_READ_BATCH_MAX"] ?? "16 (the default)"} and DATABASE_CONFIRM_GROUP_MAX=${process.env["DATABASE_CONFIRM_GROUP_MAX"] ?? "16 (the default)"}; MariaDB, Azurite, the baseline and the load generator share the same machine.`,
    "",
    "## Targets",
    "",
    "| target | result | |",
    "|---|---|---|",
    ...targets.map(([what, ok, value]) => `| ${what} | ${value} | ${ok ? "met" : "**missed**"} |`),
    "",
    "## Per operation",
    "",
    `Baseline: a minimal Fastify route running the same single-row SELECT with mysql2 on the same database: ${f(baselineRps)} req/s, its runs taken in turn with the GetActiveVersion rows' (baseline, REST, gRPC, then again), so that the ratios the targets read see the same machine. "× baseline" is a read's throughput over it. For ConfirmUpload it is over what its dependencies' work allows on these cores, as if the service's own cost nothing: ${f(confirmBound)}/s, the cores over the CPU MariaDB, Azurite, the load generator and the kernel spent per confirm (measured from /proc during the row; the note under the table). The two ceiling rows below it measure MariaDB (a confirm's transaction, ungrouped) and Azurite (the HEAD, copy and delete a confirm asks of it) each with the machine to itself; on Azure the storage service does that work on its own machines. The last ceiling row is Azurite's HEAD alone: all a confirm asked of the store before it sealed each version into a copy no upload URL can write, so the two rows give the sealing's cost on this machine. The "large data" rows read random entities of a data set seeded with SQL; for the larger set, "×" is its throughput over the same read on the smaller one, taken in turn.`,
    "",
    "| operation | protocol | req/s | × baseline | p50 ms | p95 ms | p99 ms | errors | service CPU (cores) | CPU µs per request | together | service RSS MB |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => {
      const m = (k: keyof LoadResult) => median(r.runs.map((x) => x.load[k] as number));
      return `| ${r.name} | ${r.protocol} | ${f(m("rps"))} | ${r.ratio === undefined ? "" : `${r.ratio.toFixed(2)}×`} | ${f(m("p50"), 2)} | ${f(m("p95"), 2)} | ${f(m("p99"), 2)} | ${r.runs.reduce((a, x) => a + x.load.errors, 0)} | ${f(median(r.runs.map((x) => x.cpuCores)), 2)} | ${f((median(r.runs.map((x) => x.cpuCores)) / m("rps")) * 1e6)} | ${r.together === undefined ? "" : r.together.toFixed(1)} | ${f(Math.max(...r.runs.map((x) => x.rssMb)))} |`;
    }),
    "",
    `The hot entity: ${cfg.racers} concurrent confirms with one base settled in ${settles.map((s) => s.toFixed(0)).join(", ")} ms (median ${median(settles).toFixed(0)} ms); exactly 1 created and ${cfg.racers - 1} STALE_BASE every round: ${hotOk ? "yes" : "no"}.`,
    grpcCostNote(rows),
    halfNote,
    '"together": for a read, the reads per batched statement; for ConfirmUpload, the confirms per transaction (from the service\'s own batch and group metrics).',
    `The service's peak RSS over the whole run: ${peakRss.toFixed(0)} MB. The baseline row reports the baseline process's CPU and memory; every other row the service's; ceiling rows measure the database and the emulator alone.`,
    "",
  ];
  if (planLines.length > 0) {
    lines.push(
      "## Query plans",
      "",
      `The hot statements on the large data set (${"`"}src/store/version-queries.ts${"`"}), as MariaDB's ANALYZE ran them: every table read by an index, nothing sorted or materialised over an entity's history (r_rows: the rows actually read).`,
      "",
      ...planLines,
    );
  }
  return lines.join("\n");
}

/**
 * What gRPC costs over REST for the same read: both go through the same
 * interceptors, service and store, so the difference in the service's CPU
 * per request is the protocol's own path (Connect's gRPC handler on Node's
 * HTTP/2 compatibility API against Fastify's HTTP/1.1 JSON route).
 */
function grpcCostNote(rows: Array<{ name: string; protocol: string; runs: Array<{ load: LoadResult; cpuCores: number }> }>): string {
  const perRequest = (protocol: string) => {
    const row = rows.find((r) => r.name === "GetActiveVersion" && r.protocol === protocol);
    if (row === undefined || row.runs.length === 0) return Number.NaN;
    return (median(row.runs.map((x) => x.cpuCores)) / median(row.runs.map((x) => x.load.rps))) * 1e6;
  };
  const grpc = perRequest("gRPC");
  const rest = perRequest("REST");
  if (!Number.isFinite(grpc) || !Number.isFinite(rest)) return "";
  return `What gRPC costs: GetActiveVersion takes ${grpc.toFixed(0)} µs of the service's CPU per request over gRPC and ${rest.toFixed(0)} µs over REST. Both run the same interceptors, service and store, so the ${(grpc - rest).toFixed(0)} µs between them is the gRPC protocol's own path: Connect's gRPC handler (its async-iterable pipeline, web Headers, an abort controller per call) on Node's HTTP/2 compatibility API, and the garbage they leave. Every gRPC call takes that path, as the gRPC documents require of it (docs/performance.md says why there is no shortcut around it).`;
}

main().catch((error: unknown) => {
  for (const child of children) child.kill("SIGKILL");
  process.stderr.write(`bench failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});

// Starts the service for a test: in-process on port 0 (buildServer via
// createApp), or as a separate OS process running src/main.ts.
import { type ChildProcess, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { createLogger } from "../../src/ops/logger.js";
import { type App, createApp } from "../../src/app.js";
import type { BlobStore } from "../../src/blob/blob-store.js";
import type { Authenticator } from "../../src/auth/caller.js";
import { loadConfig } from "../../src/config.js";
import { type Backend, createTestDatabase, sharedAzurite, type TestDatabase } from "./env.js";
import { GrpcClient } from "./grpc-client.js";
import { apiDocument } from "./openapi.js";
import { type AnswerCheck, RestClient } from "./rest.js";
import { bearer, testAuth, token } from "./tokens.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** A running service under test and clients for it. */
export interface TestService {
  readonly url: string;
  /** REST client acting as user "tester" with the publisher role. */
  readonly rest: RestClient;
  /** gRPC client acting as user "tester" with the publisher role. */
  readonly grpc: GrpcClient;
  /** A REST client sending these headers instead (none: anonymous). */
  restAs(headers: Record<string, string>): RestClient;
  /** A gRPC client sending this metadata instead (none: anonymous). */
  grpcAs(metadata: Record<string, string>): GrpcClient;
  readonly env: Readonly<Record<string, string>>;
  readonly db: TestDatabase;
  close(): Promise<void>;
}

/** The environment a test service runs with: shared Azurite, its own container and database. */
export async function serviceEnv(db: TestDatabase, extra: Record<string, string> = {}): Promise<Record<string, string>> {
  const azurite = await sharedAzurite();
  return {
    HOST: "127.0.0.1",
    PORT: "0",
    DATABASE_URL: db.url,
    AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString,
    AZURE_STORAGE_CONTAINER: `ev-${randomBytes(6).toString("hex")}`,
    PAGE_TOKEN_SECRET: "test-page-token-secret-0123456789abcdef",
    AUTH_JWT_SECRET: testAuth.secret,
    AUTH_ISSUER: testAuth.issuer,
    AUTH_AUDIENCE: testAuth.audience,
    DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "ev-data-")),
    LOG_LEVEL: process.env["TEST_LOG_LEVEL"] ?? "silent",
    ...extra,
  };
}

let testerToken: Promise<string> | undefined;

/**
 * The operation, status and code of every REST answer the test services
 * gave, per backend: each was held to the OpenAPI document on arrival.
 */
export const answersSeen: Record<Backend, Set<string>> = { mysql: new Set(), sqlite: new Set() };

/** Clients for a service at `url`: the default ones act as "tester", a publisher. Their answers are held to the OpenAPI document. */
async function clients(url: string, backend: Backend) {
  testerToken ??= token({ sub: "tester", roles: ["publisher"], expiresIn: 24 * 3600 });
  const auth = bearer(await testerToken);
  const address = url.replace(/^http:\/\//, "");
  const extra: GrpcClient[] = [];
  const grpc = new GrpcClient(address, auth);
  const check: AnswerCheck = (method, path, res) => apiDocument().check({ method, path, ...res }, answersSeen[backend]);
  return {
    rest: new RestClient(url, auth, check),
    grpc,
    restAs: (headers: Record<string, string>) => new RestClient(url, headers, check),
    grpcAs: (metadata: Record<string, string>) => {
      const client = new GrpcClient(address, metadata);
      extra.push(client);
      return client;
    },
    closeClients: () => [grpc, ...extra].forEach((c) => c.close()),
  };
}

/** Starts the service in this process on a fresh database (or the one given). */
export async function startService(
  backend: Backend,
  options: {
    db?: TestDatabase;
    env?: Record<string, string>;
    logger?: ReturnType<typeof createLogger>;
    authenticator?: Authenticator;
    blobStore?: (store: BlobStore) => BlobStore;
  } = {},
): Promise<TestService & { app: App }> {
  const db = options.db ?? (await createTestDatabase(backend));
  const env = await serviceEnv(db, options.env);
  const config = loadConfig(env);
  const app = await createApp(config, {
    logger: options.logger ?? createLogger(config.logLevel),
    ...(options.authenticator === undefined ? {} : { authenticator: options.authenticator }),
    ...(options.blobStore === undefined ? {} : { blobStore: options.blobStore }),
  });
  const url = await app.server.listen({ host: config.host, port: 0 });
  const { closeClients, ...c } = await clients(url, backend);
  return {
    app,
    url,
    ...c,
    env,
    db,
    close: async () => {
      closeClients();
      await app.close();
      if (options.db === undefined) await db.drop();
    },
  };
}

/** Spawned services still running; one exit listener kills them all (one each would trip Node's listener-leak warning). */
const liveChildren = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of liveChildren) child.kill("SIGKILL");
});

/** Starts the service as a separate OS process (src/main.ts) with this environment. */
export async function spawnService(
  env: Record<string, string>,
  db: TestDatabase,
  /** ownGroup: the leader of its own process group, as a shell's foreground job is, so a test can signal the group as a terminal does. */
  options: { ownGroup?: boolean } = {},
): Promise<TestService & { child: ChildProcess; output: () => string; stdout: () => string; stderr: () => string }> {
  const child = spawn(process.execPath, ["--import", "tsx", path.join(root, "src/main.ts")], {
    cwd: root,
    detached: options.ownGroup === true,
    // info at least: start-up is detected by the "listening" line.
    env: { PATH: process.env["PATH"] ?? "", ...env, LOG_LEVEL: env["LOG_LEVEL"] === "debug" || env["LOG_LEVEL"] === "trace" ? env["LOG_LEVEL"] : "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // A spawned service never outlives the test process, whatever happens to the test.
  liveChildren.add(child);
  child.once("exit", () => liveChildren.delete(child));
  let output = "";
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
    stdout += chunk.toString();
  });
  child.stderr!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
    stderr += chunk.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`service did not start: ${out.slice(-2000)}`));
    }, 60_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /entity-versions listening on (http:\/\/[^\s"]+)/.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code}: ${out.slice(-2000)}`));
    });
  });
  const { closeClients, ...c } = await clients(url, db.url.startsWith("sqlite:") ? "sqlite" : "mysql");
  return {
    child,
    output: () => output,
    stdout: () => stdout,
    stderr: () => stderr,
    url,
    ...c,
    env,
    db,
    close: async () => {
      closeClients();
      // Exited already, with a code or by a signal: waiting for "exit" again would wait forever.
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

let versionCounter = 0;
const versionBase = Date.UTC(2026, 0, 1);

/** A fresh, valid version string (one second after the previous one). */
export function nextVersionString(): string {
  const d = new Date(versionBase + versionCounter++ * 1000 + process.pid * 86_400_000);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getUTCFullYear()}.${p(d.getUTCMonth() + 1)}.${p(d.getUTCDate())}-${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}`;
}

/** A fresh SHA-256 source hash. */
export function newSourceHash(): string {
  return createHash("sha256").update(randomBytes(16)).digest("hex");
}

/** A fresh entity id. */
export function newEntityId(prefix = "ent"): string {
  return `${prefix}-${randomBytes(6).toString("hex")}`;
}

/** PUTs bytes to a SAS upload URL with the headers upload-url returned. */
export async function putBlob(url: string, body: string | Buffer, headers: Record<string, string>): Promise<number> {
  const res = await fetch(url, { method: "PUT", body, headers });
  await res.arrayBuffer();
  return res.status;
}

/** What a push sends; everything defaults to a fresh, valid value. */
export interface PushOptions {
  version?: string;
  sourceHash?: string;
  base?: string;
  content?: string;
  lockfile?: string;
  setAsActive?: boolean;
  force?: boolean;
  /** upload-url's force only (confirm's comes from `force`): to get URLs for source already published. */
  uploadForce?: boolean;
  extra?: Record<string, unknown>;
}

/** Requests upload URLs and uploads the package (and lockfile): step one of a push. */
export async function uploadOnly(svc: { rest: RestClient }, entityId: string, o: PushOptions = {}) {
  const version = o.version ?? nextVersionString();
  const sourceHash = o.sourceHash ?? newSourceHash();
  const res = await svc.rest.post(`/api/entities/${entityId}/versions/upload-url`, {
    version,
    source_hash: sourceHash,
    ...(o.base === undefined ? {} : { base_version_id: o.base }),
    ...(o.force === undefined && o.uploadForce === undefined ? {} : { force: o.uploadForce ?? o.force }),
  });
  if (res.status !== 200 || res.body.upload_url === undefined) return { res, version, sourceHash, content: "" };
  const content = o.content ?? `package ${version} ${sourceHash}`;
  const put = await putBlob(res.body.upload_url, content, res.body.upload_headers);
  if (put !== 201) throw new Error(`upload PUT answered ${put}`);
  if (o.lockfile !== undefined) {
    const putLock = await putBlob(res.body.lockfile_upload_url, o.lockfile, res.body.upload_headers);
    if (putLock !== 201) throw new Error(`lockfile PUT answered ${putLock}`);
  }
  return { res, version, sourceHash, content };
}

/** A whole push over REST: upload-url, PUT, confirm. Returns the confirm response. */
export async function push(svc: { rest: RestClient }, entityId: string, o: PushOptions = {}) {
  const up = await uploadOnly(svc, entityId, o);
  if (up.res.status !== 200 || up.res.body.upload_url === undefined) return { ...up, confirm: undefined };
  const confirm = await svc.rest.post(`/api/entities/${entityId}/versions/confirm`, {
    storage_path: up.res.body.storage_path,
    version: up.version,
    source_hash: up.sourceHash,
    file_size_bytes: Buffer.byteLength(up.content),
    ...(o.base === undefined ? {} : { base_version_id: o.base }),
    ...(o.lockfile === undefined ? {} : { package_lock_path: up.res.body.package_lock_path }),
    ...(o.setAsActive === undefined ? {} : { set_as_active: o.setAsActive }),
    ...(o.force === undefined ? {} : { force: o.force }),
    ...o.extra,
  });
  return { ...up, confirm };
}

/** A logger writing to memory, and the text it has written: for asserting on logs. */
export function memoryLogger(level = "info"): { logger: ReturnType<typeof createLogger>; text: () => string } {
  let text = "";
  const sink = new Writable({
    write(chunk, _enc, done) {
      text += chunk.toString();
      done();
    },
  });
  return { logger: createLogger(level, sink), text: () => text };
}

/** A blob store that answers as `store` does, but for the calls `faults` replaces (to inject failures). */
export function blobStoreWith(store: BlobStore, faults: Partial<BlobStore>): BlobStore {
  return {
    signUploadUrl: (path, expiresOn) => store.signUploadUrl(path, expiresOn),
    signDownloadUrl: (path, expiresOn) => store.signDownloadUrl(path, expiresOn),
    stat: (path, signal) => store.stat(path, signal),
    copyOnce: (source, destination, ifMatch, signal) => store.copyOnce(source, destination, ifMatch, signal),
    deleteIfExists: (path, signal) => store.deleteIfExists(path, signal),
    list: (prefix) => store.list(prefix),
    ping: () => store.ping(),
    ...faults,
  };
}

/** Whether the blob at `path` is gone within `withinMs` (deletes that follow an answer land moments after it). */
export async function blobGone(store: Pick<BlobStore, "stat">, path: string, withinMs = 3_000): Promise<boolean> {
  for (const until = Date.now() + withinMs; ; await new Promise((resolve) => setTimeout(resolve, 50))) {
    if ((await store.stat(path)) === undefined) return true;
    if (Date.now() > until) return false;
  }
}

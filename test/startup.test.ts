// Starting the real process (src/main.ts): development mode's token, and
// production's refusals.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import knexFactory from "knex";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { AzureBlobStore } from "../src/blob/azure-blob-store.js";
import { uploadPaths } from "../src/blob/blob-paths.js";
import { azuriteAccount, azuriteKey, startEmbeddedAzurite } from "../src/blob/embedded-azurite.js";
import { createTestDatabase, mysqlAvailable, sharedAzurite } from "./support/env.js";
import { newEntityId, push, spawnService } from "./support/service.js";
import { RestClient } from "./support/rest.js";
import { testAuth } from "./support/tokens.js";

const s = suite("start-up: development token, production refusals");

function run(env: Record<string, string>): { status: number | null; output: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", "src/main.ts"], { env: { PATH: process.env["PATH"] ?? "", ...env }, encoding: "utf8", timeout: 60_000 });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

s("without auth configured, npm start prints a working token for user dev and writes it to ./data/dev-token", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-dev-"));
  const azurite = await sharedAzurite();
  const svc = await spawnService(
    // A bound on token lifetimes holds for the development token too.
    { PORT: "0", DATA_DIR: dataDir, AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, AZURE_STORAGE_CONTAINER: "ev-dev-mode", AUTH_MAX_TOKEN_LIFETIME: "7200" },
    { url: "", drop: async () => undefined },
  );
  try {
    // stderr and stdout are two pipes: the token printed before the
    // "listening" line may still be on its way when that line is read.
    const token = () => /export TOKEN=(\S+)/.exec(svc.stderr())?.[1];
    for (let waited = 0; token() === undefined && waited < 5_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    const printed = token();
    assert.ok(printed !== undefined, svc.output());
    assert.not.match(svc.stdout(), printed!, "stdout is the JSON log stream: the token goes to stderr");
    // Development mode listens on this machine only unless HOST says otherwise.
    assert.match(svc.url, /^http:\/\/127\.0\.0\.1:/);
    assert.is(fs.readFileSync(path.join(dataDir, "dev-token"), "utf8").trim(), printed);
    assert.ok(fs.existsSync(path.join(dataDir, "entity-versions.db")), "the SQLite default lives under DATA_DIR");
    const dev = new RestClient(svc.url, { authorization: `Bearer ${printed}` });
    const e = newEntityId();
    const pushed = await push({ rest: dev }, e);
    assert.is(pushed.confirm?.status, 201);
    assert.is(pushed.confirm?.body.version.published_by, "dev");
    assert.equal((await dev.get(`/api/entities/${e}/access`)).body.publishers, ["dev"]);
    assert.not.match(svc.output().split("\n").filter((l) => l.startsWith("{")).join("\n"), printed!, "the token is printed, never logged");
    const minted = spawnSync(process.execPath, ["--import", "tsx", "src/tools/mint-token.ts", "--sub", "erin", "--roles", ""], {
      env: { PATH: process.env["PATH"] ?? "", DATA_DIR: dataDir },
      encoding: "utf8",
    });
    assert.is(minted.status, 0, minted.stderr);
    const erin = new RestClient(svc.url, { authorization: `Bearer ${minted.stdout.trim()}` });
    assert.is((await erin.get(`/api/entities/${e}/versions`)).body.code, "ENTITY_NOT_FOUND", "a minted token for another user works and has no access");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

/** A stopped service left nothing of its own running on its data folder: its emulator stopped (a moment after it), its claim removed. */
async function assertGaveBack(dataDir: string): Promise<void> {
  for (let waited = 0; emulatorsOn(dataDir).length > 0 && waited < 5_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(emulatorsOn(dataDir), [], "its emulator is stopped");
  assert.not.ok(fs.existsSync(path.join(dataDir, "service.pid")), "the data folder is given back");
}

/** The pids of the Azurite processes running on a data folder. */
function emulatorsOn(dataDir: string): number[] {
  return spawnSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" })
    .stdout.split("\n")
    .filter((line) => line.includes("azurite") && line.includes(dataDir))
    .map((line) => Number(line.trim().split(" ")[0]));
}

s("a start with AUTH_JWT_SECRET on a DATA_DIR a development start left its token in removes that token, which it would refuse and the command line reads first", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-dev-left-"));
  fs.writeFileSync(path.join(dataDir, "dev-token"), "eyJhbGciOiJIUzI1NiJ9.e30.left\n");
  const azurite = await sharedAzurite();
  const svc = await spawnService(
    { PORT: "0", DATA_DIR: dataDir, AUTH_JWT_SECRET: "s".repeat(40), AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, AZURE_STORAGE_CONTAINER: "ev-dev-left" },
    { url: "", drop: async () => undefined },
  );
  try {
    assert.not.ok(fs.existsSync(path.join(dataDir, "dev-token")), svc.output());
    assert.match(svc.output(), "removed the development token an earlier start without AUTH_JWT_SECRET or AUTH_JWKS_URL left");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("the embedded Azurite stops when the service is killed (kill -9), so a restart does not run a second one on the same files", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-orphan-"));
  const emulators = () => emulatorsOn(dataDir);
  const svc = await spawnService({ PORT: "0", DATA_DIR: dataDir }, { url: "", drop: async () => undefined });
  try {
    assert.is(emulators().length, 1, "the service runs one emulator on its data folder");
    const exited = new Promise((resolve) => svc.child.once("exit", resolve));
    svc.child.kill("SIGKILL");
    await exited;
    for (let waited = 0; emulators().length > 0 && waited < 10_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(emulators(), [], "no emulator is left running");
  } finally {
    for (const pid of emulators()) process.kill(pid, "SIGKILL");
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("Ctrl-C in a terminal (SIGINT to the whole process group) stops the service cleanly: its Azurite is stopped by it, not by the signal", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-ctrl-c-"));
  const svc = await spawnService({ PORT: "0", DATA_DIR: dataDir, SHUTDOWN_TIMEOUT_MS: "3000" }, { url: "", drop: async () => undefined }, { ownGroup: true });
  let pending: net.Socket | undefined;
  try {
    const exited = new Promise<number | null>((resolve) => svc.child.once("exit", resolve));
    // A request still in flight, which the stop waits for: the emulator must outlive it.
    const { port } = new URL(svc.url);
    pending = net.connect(Number(port), "127.0.0.1");
    const token = fs.readFileSync(path.join(dataDir, "dev-token"), "utf8").trim();
    pending.write(`POST /api/entities/ctrl-c/versions/upload-url HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"ver`);
    pending.on("error", () => undefined);
    await new Promise((resolve) => setTimeout(resolve, 300));
    process.kill(-svc.child.pid!, "SIGINT");
    const code = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 20_000))]);
    assert.is(code, 0, svc.output());
    assert.not.match(svc.stderr(), "Azurite exited", "the emulator was stopped by the service, after its requests");
  } finally {
    pending?.destroy();
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("HOST=0.0.0.0: the start-up line says the service listens on every interface, not only the address it names", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-any-host-"));
  const azurite = await sharedAzurite();
  const svc = await spawnService({ PORT: "0", HOST: "0.0.0.0", DATA_DIR: dataDir, AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, AZURE_STORAGE_CONTAINER: "ev-any-host" }, { url: "", drop: async () => undefined });
  try {
    assert.match(svc.stdout(), "and on every other interface (HOST=0.0.0.0)");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("METRICS_PORT: /metrics on a port of its own, named in the start-up line, and no longer on the API's port", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-metrics-port-"));
  const azurite = await sharedAzurite();
  const svc = await spawnService({ PORT: "0", METRICS_PORT: "0", DATA_DIR: dataDir, AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, AZURE_STORAGE_CONTAINER: "ev-metrics-port" }, { url: "", drop: async () => undefined });
  try {
    const metricsUrl = /metrics on (http:\/\/[^ "]+\/metrics)/.exec(svc.stdout())?.[1];
    assert.ok(metricsUrl !== undefined, svc.stdout());
    const metrics = await fetch(metricsUrl);
    assert.is(metrics.status, 200);
    assert.match(await metrics.text(), "entity_versions_rpc_requests_total");
    assert.is((await fetch(metricsUrl.replace(/\/metrics$/, "/healthz"))).status, 404, "the metrics port serves the metrics only");
    const onApi = await fetch(`${svc.url}/metrics`);
    assert.is(onApi.status, 404);
    assert.is(((await onApi.json()) as { code: string }).code, "ROUTE_NOT_FOUND");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("a SIGTERM while the service starts stops it cleanly (exit 0, its Azurite stopped), between migrations, never leaving their lock held", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-start-stop-"));
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { env: { PATH: process.env["PATH"] ?? "", PORT: "0", DATA_DIR: dataDir }, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  child.stdout.resume();
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once("exit", (code, signal) => resolve([code, signal])));
  try {
    // Claimed by the start, before its emulator, database and migrations.
    for (let waited = 0; !fs.existsSync(path.join(dataDir, "service.pid")) && waited < 20_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
    child.kill("SIGTERM");
    const ended = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 30_000))]);
    assert.equal(ended, [0, null], stderr);
    assert.match(stderr, "stopped by SIGTERM while starting");
    await assertGaveBack(dataDir);
  } finally {
    child.kill("SIGKILL");
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("a SIGTERM that arrives as the service opens its port, the end of its start, drains and stops it (exit 0) instead of being lost", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-late-stop-"));
  // The fixture signals the process from inside its listen(): the signal is
  // read by the event loop only after the rest of the start has run.
  const child = spawn(process.execPath, ["--import", "tsx", "--import", "./test/fixtures/sigterm-at-listen.ts", "src/main.ts"], {
    env: { PATH: process.env["PATH"] ?? "", PORT: "0", DATA_DIR: dataDir, SHUTDOWN_DRAIN_MS: "0" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once("exit", (code, signal) => resolve([code, signal])));
  try {
    const ended = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 30_000))]);
    assert.equal(ended, [0, null], output);
    assert.match(output, "entity-versions listening on");
    assert.match(output, '"signal":"SIGTERM","msg":"shutting down"');
    await assertGaveBack(dataDir);
  } finally {
    child.kill("SIGKILL");
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("an embedded Azurite that exits under the running service stops it, saying so, instead of failing every upload from then on", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-azurite-gone-"));
  const emulators = () => emulatorsOn(dataDir);
  const svc = await spawnService({ PORT: "0", DATA_DIR: dataDir }, { url: "", drop: async () => undefined });
  try {
    const exited = new Promise<number | null>((resolve) => svc.child.once("exit", resolve));
    const [pid] = emulators();
    assert.ok(pid !== undefined, "the service runs an emulator");
    process.kill(pid!, "SIGKILL");
    const code = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 15_000))]);
    assert.is(code, 1, svc.output());
    assert.match(svc.stderr(), "the embedded Azurite exited (SIGKILL); start the service again");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("a data folder deleted under the running service (rm -rf data) stops it, saying so, instead of answering on from files that are gone", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-deleted-"));
  const svc = await spawnService({ PORT: "0", DATA_DIR: dataDir }, { url: "", drop: async () => undefined });
  try {
    assert.is((await fetch(`${svc.url}/readyz`)).status, 200);
    const exited = new Promise<number | null>((resolve) => svc.child.once("exit", resolve));
    fs.rmSync(dataDir, { recursive: true, force: true });
    const code = await Promise.race([exited, new Promise<"running">((resolve) => setTimeout(() => resolve("running"), 15_000))]);
    assert.is(code, 1, "the service stopped, exit 1");
    assert.match(svc.stderr(), `entity-versions: stopping: DATA_DIR ${dataDir} was deleted (its service.pid is gone) while the service ran`);
    assert.match(svc.stderr(), "start the service again (npm start)");
  } finally {
    await svc.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("the embedded Azurite stops by itself when asked (it saves its data), and is not left to be killed", async () => {
  const location = fs.mkdtempSync(path.join(os.tmpdir(), "ev-azurite-stop-"));
  try {
    const azurite = await startEmbeddedAzurite({ location });
    // A client's keep-alive connection open, as the service's are.
    const container = new AzureBlobStore({ connectionString: azurite.connectionString, container: "stop-test" });
    await container.ensureContainer();
    assert.equal(await azurite.stop(), { killed: false });
  } finally {
    fs.rmSync(location, { recursive: true, force: true });
  }
});

s("a process that exits without stopping its embedded Azurite (process.exit) lets it save: the blob it just wrote is there on the next start", async () => {
  const location = fs.mkdtempSync(path.join(os.tmpdir(), "ev-azurite-exit-"));
  try {
    // Written right before the exit, well inside Azurite's 5 s between saves: only a save on the way out keeps it.
    const script = `
      import { BlobServiceClient } from "@azure/storage-blob";
      import { startEmbeddedAzurite } from "./src/blob/embedded-azurite.js";
      const azurite = await startEmbeddedAzurite({ location: process.argv[1] });
      const container = BlobServiceClient.fromConnectionString(azurite.connectionString).getContainerClient("exit-test");
      await container.createIfNotExists();
      await container.getBlockBlobClient("written-last").upload("bytes", 5);
      process.exit(0);`;
    const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script, location], { encoding: "utf8", timeout: 60_000 });
    assert.is(r.status, 0, r.stderr);
    for (let waited = 0; emulatorsOn(location).length > 0 && waited < 15_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(emulatorsOn(location), [], "the emulator stopped by itself");
    const azurite = await startEmbeddedAzurite({ location });
    try {
      const store = new AzureBlobStore({ connectionString: azurite.connectionString, container: "exit-test" });
      assert.ok((await store.stat("written-last")) !== undefined, "the emulator saved its index on the way out");
    } finally {
      await azurite.stop();
    }
  } finally {
    for (const pid of emulatorsOn(location)) process.kill(pid, "SIGKILL");
    fs.rmSync(location, { recursive: true, force: true });
  }
});

s("a start on the embedded Azurite names each version whose package or lockfile the emulator no longer holds (killed before it saved)", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-lost-packages-"));
  try {
    let svc = await spawnService({ PORT: "0", DATA_DIR: dataDir }, { url: "", drop: async () => undefined });
    const e = newEntityId();
    const pushed: Array<{ id: string; version: string }> = [];
    try {
      const dev = new RestClient(svc.url, { authorization: `Bearer ${fs.readFileSync(path.join(dataDir, "dev-token"), "utf8").trim()}` });
      for (let i = 0; i < 3; i++) {
        const p = await push({ rest: dev }, e, { lockfile: "{}", ...(i === 0 ? {} : { base: pushed[i - 1]!.id }) });
        assert.is(p.confirm?.status, 201, JSON.stringify(p.confirm?.body ?? p.res.body));
        pushed.push({ id: p.confirm!.body.version.id, version: p.version });
      }
      // What a SIGKILL of the emulator right after these confirms loses
      // (its index of blobs not saved yet), done behind the service's back.
      const blobEndpoint = /"blobEndpoint":"([^"]+)"/.exec(svc.stdout())?.[1];
      assert.ok(blobEndpoint !== undefined, svc.stdout());
      const store = new AzureBlobStore({
        connectionString: `DefaultEndpointsProtocol=http;AccountName=${azuriteAccount};AccountKey=${azuriteKey};BlobEndpoint=${blobEndpoint};`,
        container: "entity-versions",
      });
      await store.deleteIfExists(uploadPaths(e, pushed[0]!.id, "final").storagePath);
      await store.deleteIfExists(uploadPaths(e, pushed[1]!.id, "final").lockPath);
    } finally {
      await svc.close();
    }
    assert.not.match(svc.output(), "does not hold the blobs", "nothing was missing at the first start");
    svc = await spawnService({ PORT: "0", DATA_DIR: dataDir }, { url: "", drop: async () => undefined });
    try {
      const warning = svc.stdout().split("\n").find((line) => line.includes("does not hold the blobs")) ?? "";
      assert.match(warning, "of 2 version(s)", svc.output());
      assert.match(warning, new RegExp(`entity ${e} version ${pushed[0]!.version} \\(id ${pushed[0]!.id}\\): its package[;.]`));
      assert.match(warning, new RegExp(`entity ${e} version ${pushed[1]!.version} \\(id ${pushed[1]!.id}\\): its lockfile[;.]`));
      assert.not.match(warning, pushed[2]!.id, "the version whose blobs are there is not named");
      assert.match(warning, "delete each");
    } finally {
      await svc.close();
    }
  } finally {
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("NODE_ENV=production refuses to start without auth, or on the embedded defaults", () => {
  const base = { NODE_ENV: "production", DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "ev-prod-")) };
  const full = {
    ...base,
    DATABASE_URL: "mysql://u:p@127.0.0.1:1/db",
    AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5;EndpointSuffix=core.windows.net",
    PAGE_TOKEN_SECRET: "Hk4Qw8Zr2Nv6Tc1Lm9Xb5Pj3Fs7Dg0Ya+page",
  };
  const jwks = { ...full, AUTH_JWKS_URL: "https://login.example.com/jwks.json", AUTH_ISSUER: "https://login.example.com/", AUTH_AUDIENCE: "ev" };
  const cases: Array<[Record<string, string>, string]> = [
    [full, "AUTH_JWT_SECRET or AUTH_JWKS_URL"],
    [{ ...jwks, AUTH_JWKS_URL: "http://login.example.com/jwks.json" }, "https://"],
    [{ ...jwks, AUTH_ISSUER: "" }, "AUTH_ISSUER and AUTH_AUDIENCE"],
    [{ ...jwks, AUTH_AUDIENCE: "" }, "AUTH_ISSUER and AUTH_AUDIENCE"],
    [{ ...full, AUTH_JWT_SECRET: "é".repeat(15) }, "AUTH_JWT_SECRET must be at least 32 bytes"],
    [{ ...full, NODE_ENV: "Production", AUTH_JWT_SECRET: "s".repeat(40) }, 'got "Production"'],
    [{ ...full, NODE_ENV: "prod", AUTH_JWT_SECRET: "s".repeat(40) }, 'got "prod"'],
    [{ ...full, AUTH_JWT_SECRET: "s".repeat(40), DATABASE_URL: "" }, "DATABASE_URL"],
    [{ ...full, AUTH_JWT_SECRET: "s".repeat(40), DATABASE_URL: "sqlite:./x.db" }, "DATABASE_URL"],
    [{ ...full, AUTH_JWT_SECRET: "s".repeat(40), AZURE_STORAGE_CONNECTION_STRING: "" }, "AZURE_STORAGE_CONNECTION_STRING"],
    [{ ...full, AUTH_JWT_SECRET: "s".repeat(40), PAGE_TOKEN_SECRET: "" }, "PAGE_TOKEN_SECRET"],
  ];
  for (const [env, name] of cases) {
    const r = run(env);
    assert.is(r.status, 2, r.output);
    assert.match(r.output, "configuration error");
    assert.match(r.output, name);
  }
  assert.equal(fs.readdirSync(base.DATA_DIR), [], "nothing was created");
});

s("an open-file limit below HTTP_MAX_CONNECTIONS is refused in production, and said in development", async () => {
  const underLimit = (env: Record<string, string>) => {
    const r = spawnSync("sh", ["-c", `ulimit -n 1024 && exec "${process.execPath}" --import tsx src/main.ts`], { env: { PATH: process.env["PATH"] ?? "", ...env }, encoding: "utf8", timeout: 60_000 });
    return { status: r.status, output: `${r.stdout}${r.stderr}` };
  };
  const production = {
    NODE_ENV: "production",
    DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "ev-prod-files-")),
    DATABASE_URL: "mysql://u:p@127.0.0.1:1/db",
    AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5;EndpointSuffix=core.windows.net",
    PAGE_TOKEN_SECRET: "Hk4Qw8Zr2Nv6Tc1Lm9Xb5Pj3Fs7Dg0Ya+page",
    AUTH_JWT_SECRET: "Qm7Vt2Kx9Lp4Rz8Nw3Hc6Jd1Fb5Gs0Ye+jwt",
  };
  const refused = underLimit(production);
  assert.is(refused.status, 2, refused.output);
  assert.match(refused.output, "configuration error: the process may open 1024 files, but HTTP_MAX_CONNECTIONS (10000)");
  assert.match(refused.output, "lower HTTP_MAX_CONNECTIONS to at most 758");
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-dev-files-"));
  // In development it is said, and the start goes on, to a port already taken here so that it ends.
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  try {
    const warned = underLimit({ DATA_DIR: dataDir, PORT: String((taken.address() as net.AddressInfo).port), HOST: "127.0.0.1" });
    assert.match(warned.output, "the process may open 1024 files");
    assert.not.match(warned.output, "configuration error");
    assert.match(warned.output, "could not start", "it went on to listen");
  } finally {
    taken.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

/** A start's settings on the shared Azurite's blob `container`, with `dataDir` as its DATA_DIR (SQLite there, unless `extra` names DATABASE_URL). */
function onContainer(connectionString: string, container: string, dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PORT: "0",
    DATA_DIR: dataDir,
    AZURE_STORAGE_CONNECTION_STRING: connectionString,
    AZURE_STORAGE_CONTAINER: container,
    AUTH_JWT_SECRET: testAuth.secret,
    AUTH_ISSUER: testAuth.issuer,
    AUTH_AUDIENCE: testAuth.audience,
    ...extra,
  };
}

s("a second database on a blob container that holds another's packages is refused at start (its sweeper would delete them); the first starts again", async () => {
  const azurite = await sharedAzurite();
  const first = fs.mkdtempSync(path.join(os.tmpdir(), "ev-owner-a-"));
  const second = fs.mkdtempSync(path.join(os.tmpdir(), "ev-owner-b-"));
  const env = (dataDir: string) => onContainer(azurite.connectionString, "ev-owned", dataDir);
  try {
    const a = await spawnService(env(first), { url: "", drop: async () => undefined });
    const e = newEntityId();
    const published = (await push(a, e)).confirm!.body.version;
    await a.close();
    const refused = run({ ...env(second), PORT: "0" });
    assert.ok(refused.status === 2, refused.output);
    assert.match(refused.output, `the blob container "ev-owned" holds another database's packages`);
    assert.match(refused.output, "AZURE_STORAGE_CONTAINER");
    // The first database as a backup taken before it had an id would bring
    // it back: a new id at its next start, and its packages in the container.
    const restored = knexFactory({ client: "better-sqlite3", connection: { filename: path.join(first, "entity-versions.db") }, useNullAsDefault: true });
    await restored("database_identity").del();
    await restored("knex_migrations").where("name", "0011-database-identity").del();
    await restored.destroy();
    const again = await spawnService(env(first), { url: "", drop: async () => undefined });
    try {
      assert.match(again.output(), "holds this database's packages: it is claimed for this one");
      assert.is((await again.rest.get(`/api/entities/${e}/versions/${published.id}`)).status, 200);
    } finally {
      await again.close();
    }
    assert.ok(run({ ...env(second), PORT: "0" }).status === 2, "the other database is still refused");
  } finally {
    fs.rmSync(first, { recursive: true, force: true });
    fs.rmSync(second, { recursive: true, force: true });
  }
});

s("two databases without versions given one configured blob container: the second is refused (the first may push at any time), legacy-layout packages count, and CLAIM_EMPTY_CONTAINER takes over only an empty one", async () => {
  const azurite = await sharedAzurite();
  const container = `ev-shared-${randomBytes(4).toString("hex")}`;
  const first = fs.mkdtempSync(path.join(os.tmpdir(), "ev-shared-x-"));
  const second = fs.mkdtempSync(path.join(os.tmpdir(), "ev-shared-z-"));
  const env = (dataDir: string, extra: Record<string, string> = {}) => onContainer(azurite.connectionString, container, dataDir, extra);
  const none = { url: "", drop: async () => undefined };
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container });
  try {
    await (await spawnService(env(first), none)).close();
    const claimed = await store.recordedOwner();
    assert.ok(claimed !== undefined);
    const refused = run(env(second));
    assert.is(refused.status, 2, refused.output);
    assert.match(refused.output, `the blob container "${container}" holds another database's packages (database ${claimed.databaseId}`);
    assert.match(refused.output, `If that database is gone for good, start this one once with CLAIM_EMPTY_CONTAINER=${container}.`);
    assert.equal(await store.recordedOwner(), claimed, "still the first database's");

    // A package of the layout before uploads/ and versions/ is a package too.
    const legacy = uploadPaths(newEntityId(), "00000000-0000-4000-8000-000000000000", "legacy").storagePath;
    assert.is((await fetch(store.signUploadUrl(legacy, new Date(Date.now() + 60_000)), { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: "old" })).status, 201);
    const legacyHeld = run(env(second, { CLAIM_EMPTY_CONTAINER: container }));
    assert.is(legacyHeld.status, 2, legacyHeld.output);
    assert.match(legacyHeld.output, ": 1 blob of packages, under uploads/, versions/ or the legacy {entity}/{upload}/)");
    assert.equal(await store.recordedOwner(), claimed, "still the first database's");

    // Said to be gone, the first database's empty container is taken over.
    await new BlobServiceClient(azurite.blobEndpoint, new StorageSharedKeyCredential(azuriteAccount, azuriteKey)).getContainerClient(container).deleteBlob(legacy);
    const z = await spawnService(env(second, { CLAIM_EMPTY_CONTAINER: container }), none);
    try {
      assert.match(z.output(), "CLAIM_EMPTY_CONTAINER: the blob container recorded another database, but holds no packages: it is claimed for this one");
    } finally {
      await z.close();
    }
    assert.is(run(env(first)).status, 2, "now the first one is refused");
  } finally {
    fs.rmSync(first, { recursive: true, force: true });
    fs.rmSync(second, { recursive: true, force: true });
  }
});

s("a database without versions on a blob container that records no owner but holds another database's packages (filled before owner records) is refused, and they are kept", async () => {
  const azurite = await sharedAzurite();
  const container = `ev-unrecorded-${randomBytes(4).toString("hex")}`;
  const first = fs.mkdtempSync(path.join(os.tmpdir(), "ev-unrecorded-a-"));
  const second = fs.mkdtempSync(path.join(os.tmpdir(), "ev-unrecorded-b-"));
  // Swept at once: claimed, the second database's first sweep would delete the first one's packages.
  const env = (dataDir: string) => onContainer(azurite.connectionString, container, dataDir, { ORPHAN_GRACE_SECONDS: "1", SWEEP_INTERVAL_SECONDS: "1" });
  const none = { url: "", drop: async () => undefined };
  const store = new AzureBlobStore({ connectionString: azurite.connectionString, container });
  try {
    const a = await spawnService(env(first), none);
    const e = newEntityId();
    const published = (await push(a, e)).confirm!.body.version;
    await a.close();
    await new BlobServiceClient(azurite.blobEndpoint, new StorageSharedKeyCredential(azuriteAccount, azuriteKey)).getContainerClient(container).deleteBlob("entity-versions-owner.json");
    const refused = run(env(second));
    assert.is(refused.status, 2, refused.output);
    assert.match(refused.output, `the blob container "${container}" records no owner but holds 1 blob of versions' packages (under versions/ or the legacy {entity}/{upload}/), while this database has no versions`);
    assert.match(refused.output, "give this database its own container with AZURE_STORAGE_CONTAINER");
    assert.is(await store.recordedOwner(), undefined, "not claimed");
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const again = await spawnService(env(first), none);
    try {
      assert.is((await again.rest.get(`/api/entities/${e}/versions/${published.id}`)).status, 200, again.output());
    } finally {
      await again.close();
    }
  } finally {
    fs.rmSync(first, { recursive: true, force: true });
    fs.rmSync(second, { recursive: true, force: true });
  }
});

for (const backend of ["sqlite", ...((await mysqlAvailable()) ? ["mysql" as const] : [])] as const) {
  s(`${backend}: a database with versions on a new, empty blob container (a mistyped connection string or container) is refused, naming it and what to check; one that holds its packages but no owner record is claimed; CLAIM_EMPTY_CONTAINER claims an empty one`, async () => {
    const azurite = await sharedAzurite();
    const db = await createTestDatabase(backend);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-empty-container-"));
    const suffix = randomBytes(4).toString("hex");
    const home = `ev-home-${suffix}`;
    const empty = `ev-empty-${suffix}`;
    const other = `ev-other-${suffix}`;
    const env = (container: string, extra: Record<string, string> = {}) => onContainer(azurite.connectionString, container, dataDir, { DATABASE_URL: db.url, ...extra });
    const store = (container: string) => new AzureBlobStore({ connectionString: azurite.connectionString, container });
    try {
      const a = await spawnService(env(home), db);
      const e = newEntityId();
      const published = (await push(a, e)).confirm!.body.version;
      await a.close();

      const refused = run(env(empty));
      assert.is(refused.status, 2, refused.output);
      assert.match(
        refused.output,
        `configuration error: the blob container "${empty}" (at ${azurite.blobEndpoint}/${empty}) holds none of this database's packages: it holds no packages at all, while the database records versions`,
      );
      assert.match(refused.output, `Check AZURE_STORAGE_CONNECTION_STRING (its account is "${azuriteAccount}") and AZURE_STORAGE_CONTAINER, and DATABASE_URL`);
      assert.match(refused.output, `start it once with CLAIM_EMPTY_CONTAINER=${empty}.`);
      assert.not.match(refused.output, azuriteKey, "no secret in the message");
      assert.is(await store(empty).recordedOwner(), undefined, "the empty container was not claimed");

      // A container that holds other packages and records no owner: never claimed, CLAIM_EMPTY_CONTAINER or not.
      await store(other).ensureContainer();
      const stray = new URL(store(other).signUploadUrl(`versions/${e}/00000000-0000-4000-8000-000000000000/package`, new Date(Date.now() + 60_000)));
      assert.is((await fetch(stray, { method: "PUT", headers: { "x-ms-blob-type": "BlockBlob" }, body: "not ours" })).status, 201);
      const elsewhere = run(env(other, { CLAIM_EMPTY_CONTAINER: other }));
      assert.is(elsewhere.status, 2, elsewhere.output);
      assert.match(elsewhere.output, `it holds 1 blob of packages, under uploads/, versions/ or the legacy {entity}/{upload}/, none of them this database's`);
      assert.match(elsewhere.output, "this container cannot be claimed for this database");

      // Another database's container (settings that name the wrong one): told to check them, not to give this database one of its own.
      const theirs = `ev-theirs-${suffix}`;
      const theirDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-theirs-"));
      try {
        const theirDb = `sqlite:${path.join(theirDataDir, "theirs.db")}`;
        const t = await spawnService({ ...env(theirs), DATA_DIR: theirDataDir, DATABASE_URL: theirDb }, { url: theirDb, drop: async () => undefined });
        await push(t, newEntityId());
        await t.close();
      } finally {
        fs.rmSync(theirDataDir, { recursive: true, force: true });
      }
      const theirOwner = await store(theirs).recordedOwner();
      const misdirected = run(env(theirs));
      assert.is(misdirected.status, 2, misdirected.output);
      assert.match(misdirected.output, `the blob container "${theirs}" (at ${azurite.blobEndpoint}/${theirs}) holds none of this database's packages: it holds `);
      assert.match(misdirected.output, `and it records database ${theirOwner!.databaseId} (since ${theirOwner!.claimedAt}) as their owner, while the database records versions`);
      assert.match(misdirected.output, "Check AZURE_STORAGE_CONNECTION_STRING");
      assert.not.match(misdirected.output, "give this database its own container", "its own container exists: the settings name another");

      // Its own container, whose owner record is gone (as one a release before owner records filled): it holds the packages, and is claimed.
      await new BlobServiceClient(`${azurite.blobEndpoint}`, new StorageSharedKeyCredential(azuriteAccount, azuriteKey)).getContainerClient(home).deleteBlob("entity-versions-owner.json");
      const b = await spawnService(env(home), db);
      try {
        assert.is((await b.rest.get(`/api/entities/${e}/versions/${published.id}/download`)).status, 200);
      } finally {
        await b.close();
      }
      assert.ok((await store(home).recordedOwner()) !== undefined, "claimed again");

      // Said to be lost, the packages are given up: the empty container is claimed, with a warning, and the version answers 404 from the store.
      assert.match(run(env(empty, { CLAIM_EMPTY_CONTAINER: home })).output, `CLAIM_EMPTY_CONTAINER names "${home}", but the container is "${empty}"`);
      const c = await spawnService(env(empty, { CLAIM_EMPTY_CONTAINER: empty }), db);
      try {
        assert.match(c.output(), "CLAIM_EMPTY_CONTAINER: the blob container holds none of this database's packages and is claimed for it");
        const dl = await c.rest.get(`/api/entities/${e}/versions/${published.id}/download`);
        assert.is((await fetch(dl.body.download_url)).status, 404);
      } finally {
        await c.close();
      }
    } finally {
      await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
}

s("a database file deleted to start over (SQLite and the embedded Azurite in one DATA_DIR): the new database claims the emulator's container when it holds no packages, and is told to delete DATA_DIR/azurite when it does", async () => {
  // The service runs from here: a DATA_DIR named as the README's example names a second one.
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ev-start-over-"));
  const dataDir = path.join(cwd, "data-sqlite");
  const env = { PORT: "0", DATA_DIR: dataDir, AUTH_JWT_SECRET: testAuth.secret, AUTH_ISSUER: testAuth.issuer, AUTH_AUDIENCE: testAuth.audience };
  const none = { url: "", drop: async () => undefined };
  const dbFile = path.join(dataDir, "entity-versions.db");
  const deleteDatabase = () => {
    for (const file of [dbFile, `${dbFile}-wal`, `${dbFile}-shm`]) fs.rmSync(file, { force: true });
  };
  try {
    await (await spawnService(env, none)).close();
    deleteDatabase();
    const fresh = await spawnService(env, none);
    try {
      assert.match(fresh.output(), "the blob container recorded another database, but holds no packages: it is claimed for this one");
      assert.is((await push(fresh, newEntityId())).confirm?.status, 201);
    } finally {
      await fresh.close();
    }
    // The other way round, the emulator's folder moved away: its versions' packages are not there.
    const azuriteDir = path.join(dataDir, "azurite");
    fs.renameSync(azuriteDir, `${azuriteDir}.kept`);
    const lost = run(env);
    assert.is(lost.status, 2, lost.output);
    assert.match(lost.output, `the blob container "entity-versions" (the embedded Azurite's, in ${azuriteDir}) holds none of this database's packages: it holds no packages at all`);
    assert.match(lost.output, `Check DATA_DIR (the embedded Azurite keeps the packages in ${azuriteDir}`);
    fs.rmSync(azuriteDir, { recursive: true, force: true });
    fs.renameSync(`${azuriteDir}.kept`, azuriteDir);
    deleteDatabase();
    const refused = spawnSync(process.execPath, ["--import", import.meta.resolve("tsx"), path.resolve("src/main.ts")], {
      cwd,
      env: { PATH: process.env["PATH"] ?? "", ...env, DATA_DIR: "./data-sqlite" },
      encoding: "utf8",
      timeout: 60_000,
    });
    const output = `${refused.stdout}${refused.stderr}`;
    assert.is(refused.status, 2, output);
    assert.match(output, /holds another database's packages \(database [0-9a-f-]+, since [^)]+: \d+ blobs? of packages, under uploads\/, versions\/ or the legacy \{entity\}\/\{upload\}\/\)/);
    assert.match(output, "or its own DATA_DIR (and with it its own embedded Azurite), e.g. DATA_DIR=./data-sqlite-2.", "a folder other than the one in use");
    assert.match(output, `To start over instead, delete the packages left there by the database that recorded it: the folder ${dataDir}/azurite (the embedded Azurite's), or the whole DATA_DIR (${dataDir}).`);
    // As it says: without the emulator's folder, the database starts.
    fs.rmSync(path.join(dataDir, "azurite"), { recursive: true, force: true });
    await (await spawnService(env, none)).close();
  } finally {
    fs.rmSync(cwd, { recursive: true, force: true });
  }
});

s("a port already taken stops the start with a message that says to set PORT", async () => {
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  const port = (taken.address() as net.AddressInfo).port;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-port-"));
  try {
    const azurite = await sharedAzurite();
    const r = run({ PORT: String(port), DATA_DIR: dataDir, AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString, AZURE_STORAGE_CONTAINER: "ev-port-taken" });
    assert.is(r.status, 1, r.output);
    assert.match(r.output, `could not start: listen EADDRINUSE`);
    assert.match(r.output, `another process listens on 127.0.0.1:${port}: stop it, or set PORT to a free port`);
  } finally {
    taken.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("npm run token signs with AUTH_JWT_SECRET in production without the server's other settings, and has --help", () => {
  const mint = (args: string[], env: Record<string, string>) =>
    spawnSync(process.execPath, ["--import", "tsx", "src/tools/mint-token.ts", ...args], { env: { PATH: process.env["PATH"] ?? "", ...env }, encoding: "utf8" });
  const minted = mint(["--sub", "ops"], { NODE_ENV: "production", AUTH_JWT_SECRET: "Zq3x9Lr7Tb2Wm5Kc8Hf1Jd4Gs6Pn0Vy+/AbCdEfGh=" });
  assert.is(minted.status, 0, minted.stderr);
  assert.match(minted.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
  const refused = mint([], { NODE_ENV: "production" });
  assert.is(refused.status, 2);
  assert.match(refused.stderr, "AUTH_JWT_SECRET or AUTH_JWKS_URL");
  // Never a token the service would refuse, nor a role that does not exist.
  for (const [args, says] of [
    [["--sub", "a b"], "sub must be a user id"],
    [["--orgs", "acme,a b"], '"orgs" must be an array'],
    [["--roles", "publisher,writer"], '"writer" is not a role; the roles are publisher and admin'],
    [["--ttl", "7200"], "--ttl 7200 is longer than the service accepts (AUTH_MAX_TOKEN_LIFETIME, 3600 s)"],
  ] as const) {
    const bad = mint([...args], { AUTH_JWT_SECRET: "Zq3x9Lr7Tb2Wm5Kc8Hf1Jd4Gs6Pn0Vy+/AbCdEfGh=", AUTH_MAX_TOKEN_LIFETIME: "3600" });
    assert.is(bad.status, 2, args.join(" "));
    assert.match(bad.stderr, says);
    assert.is(bad.stdout, "");
  }
  // With no --ttl, a bound below an hour is the token's lifetime, not a refusal.
  const bounded = mint(["--sub", "ops"], { AUTH_JWT_SECRET: "Zq3x9Lr7Tb2Wm5Kc8Hf1Jd4Gs6Pn0Vy+/AbCdEfGh=", AUTH_MAX_TOKEN_LIFETIME: "600" });
  assert.is(bounded.status, 0, bounded.stderr);
  const claims = JSON.parse(Buffer.from(bounded.stdout.trim().split(".")[1]!, "base64url").toString()) as { iat: number; exp: number };
  assert.is(claims.exp - claims.iat, 600);
  const help = mint(["--help"], {});
  assert.is(help.status, 0);
  assert.match(help.stdout, "npm run -s token -- [--sub NAME]");
});

s("npm run token in development mode signs with the secret the service wrote, and never makes one of its own for a DATA_DIR the service does not use", () => {
  const mint = (env: Record<string, string>) =>
    spawnSync(process.execPath, ["--import", "tsx", "src/tools/mint-token.ts"], { env: { PATH: process.env["PATH"] ?? "", ...env }, encoding: "utf8" });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-mint-"));
  try {
    const secretFile = path.join(dataDir, "auth-dev-secret");
    const refused = mint({ DATA_DIR: dataDir });
    assert.is(refused.status, 2, refused.stdout);
    assert.is(refused.stdout, "");
    assert.match(refused.stderr, `no development secret in ${secretFile}: start the service once with \`npm start\` (it writes it), or set DATA_DIR to the folder the service uses`);
    assert.equal(fs.readdirSync(dataDir), [], "no secret written: the service, once started there, makes its own");
    // A DATA_DIR that is not there at all is not made either.
    const missing = path.join(dataDir, "typo");
    assert.is(mint({ DATA_DIR: missing }).status, 2);
    assert.not.ok(fs.existsSync(missing));
    // Once the service has written it, the tool signs with it.
    fs.writeFileSync(secretFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    const minted = mint({ DATA_DIR: dataDir });
    assert.is(minted.status, 0, minted.stderr);
    assert.match(minted.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * Runs an npm script as a container's PID 1 or a supervisor does, sends SIGTERM to npm alone, and
 * checks that the service itself drained and exited 0 (npm's shell passes no signal on).
 */
async function npmScriptStopsOnSigterm(script: string, cwd: string, dataDir: string): Promise<void> {
  let child: ReturnType<typeof spawn> | undefined;
  try {
    child = spawn("npm", ["run", "-s", script], { cwd, env: { PATH: process.env["PATH"] ?? "", PORT: "0", DATA_DIR: dataDir, SHUTDOWN_DRAIN_MS: "0" }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child!.once("exit", (code, signal) => resolve([code, signal])));
    for (let waited = 0; !output.includes("entity-versions listening on") && waited < 60_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.match(output, "entity-versions listening on");
    child.kill("SIGTERM");
    const ended = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 30_000))]);
    assert.equal(ended, [0, null], output);
    assert.match(output, '"signal":"SIGTERM","msg":"shutting down"');
    assert.not.ok(fs.existsSync(path.join(dataDir, "service.pid")), "the service itself stopped and gave its data folder back");
  } finally {
    child?.kill("SIGKILL");
    const left = fs.existsSync(path.join(dataDir, "service.pid")) ? Number(fs.readFileSync(path.join(dataDir, "service.pid"), "utf8").trim().split(/\s/)[0]) : undefined;
    if (left !== undefined && Number.isInteger(left) && left > 1) {
      try {
        process.kill(left, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
  }
}

s("npm run start:prod, as a container's PID 1 runs it, hands SIGTERM to the service: it drains and exits 0", async () => {
  // The compiled service, laid out as a production image holds it, in a folder of its own.
  const root = process.cwd();
  const image = fs.mkdtempSync(path.join(os.tmpdir(), "ev-start-prod-"));
  try {
    const built = spawnSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", root, "--outDir", path.join(image, "dist")], { encoding: "utf8", timeout: 120_000 });
    assert.is(built.status, 0, `${built.stdout}${built.stderr}`);
    fs.copyFileSync(path.join(root, "package.json"), path.join(image, "package.json"));
    fs.symlinkSync(path.join(root, "node_modules"), path.join(image, "node_modules"));
    fs.symlinkSync(path.join(root, "gen"), path.join(image, "gen"));
    await npmScriptStopsOnSigterm("start:prod", image, path.join(image, "data"));
  } finally {
    fs.rmSync(image, { recursive: true, force: true });
  }
});

s("npm start, stopped by a SIGTERM to npm alone (a supervisor, a script's kill $!), drains and exits 0 instead of leaving the service running", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-npm-start-"));
  try {
    await npmScriptStopsOnSigterm("start", process.cwd(), dataDir);
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * Runs `npm start` in its own process group, as a terminal's foreground job
 * is, so that a signal to the group reaches npm and the service both (and
 * npm passes its own copy on), and sends SIGINT to the group: once, or again
 * `againAfterMs` later. Answers how it ended and what it wrote.
 */
async function ctrlCOnNpmStart(dataDir: string, drainMs: number, againAfterMs?: number): Promise<{ ended: [number | null, NodeJS.Signals | null] | string; output: string }> {
  let child: ReturnType<typeof spawn> | undefined;
  try {
    child = spawn("npm", ["start"], { env: { PATH: process.env["PATH"] ?? "", PORT: "0", DATA_DIR: dataDir, SHUTDOWN_DRAIN_MS: String(drainMs) }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let output = "";
    child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child!.once("exit", (code, signal) => resolve([code, signal])));
    for (let waited = 0; !output.includes("entity-versions listening on") && waited < 60_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.match(output, "entity-versions listening on");
    process.kill(-child.pid!, "SIGINT");
    if (againAfterMs !== undefined) {
      await new Promise((resolve) => setTimeout(resolve, againAfterMs));
      process.kill(-child.pid!, "SIGINT");
    }
    const ended = await Promise.race([exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 30_000))]);
    // Its Azurite is stopped on the service's exit, not with it: a moment to go.
    for (let waited = 0; emulatorsOn(dataDir).length > 0 && waited < 5_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    return { ended, output };
  } finally {
    try {
      process.kill(-child!.pid!, "SIGKILL");
    } catch {
      // Already gone.
    }
    const left = fs.existsSync(path.join(dataDir, "service.pid")) ? Number(fs.readFileSync(path.join(dataDir, "service.pid"), "utf8").trim().split(/\s/)[0]) : undefined;
    if (left !== undefined && Number.isInteger(left) && left > 1 && left !== process.pid) {
      try {
        process.kill(left, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  }
}

s("npm start, stopped by one Ctrl-C (SIGINT to its process group: npm and the service each get it, and npm passes its copy on), drains once and exits 0", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-npm-ctrl-c-"));
  try {
    const { ended, output } = await ctrlCOnNpmStart(dataDir, 0);
    assert.equal(ended, [0, null], output);
    assert.is(output.split('"msg":"shutting down"').length - 1, 1, output);
    assert.not.match(output, "again", "the copy npm passes on is the same Ctrl-C, not a second one");
    assert.not.ok(fs.existsSync(path.join(dataDir, "service.pid")), "the service gave its data folder back");
  } finally {
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s("npm start, given a second Ctrl-C while it drains, stops at once (exit 130) and still gives its data folder back and stops its Azurite", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-npm-ctrl-c-again-"));
  try {
    // A drain of 10 s: the second Ctrl-C, 1.5 s after the first, comes during it.
    const { ended, output } = await ctrlCOnNpmStart(dataDir, 10_000, 1_500);
    assert.equal(ended, [130, null], output);
    assert.match(output, "SIGINT again: stopping at once");
    assert.not.ok(fs.existsSync(path.join(dataDir, "service.pid")), "an exit at once gives the data folder back too");
    assert.equal(emulatorsOn(dataDir), [], "an exit at once stops the embedded Azurite");
  } finally {
    for (const pid of emulatorsOn(dataDir)) process.kill(pid, "SIGKILL");
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

s.run();

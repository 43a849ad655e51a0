// The entity-versions CLI end to end: `node bin/entity-versions.js` run as
// a real child process against a real service (SQLite, and MySQL when it is
// reachable, as the contract suites do), with Azurite behind the signed URLs.
import { spawn } from "node:child_process";
import crypto, { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { packTree } from "../src/cli/pack.js";
import { hashFiles } from "../src/cli/source-hash.js";
import { listSourceTree } from "../src/cli/source-tree.js";
import { type Backend, createTestDatabase, mysqlAvailable } from "./support/env.js";
import type { BlobStore } from "../src/blob/blob-store.js";
import { newEntityId, push, startService, type TestService } from "./support/service.js";
import { bearer, token } from "./support/tokens.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = path.join(root, "bin", "entity-versions.js");

/** The user and group id of `nobody`, as whom the CLI runs where a test needs permissions to bite (the tests may run as root). */
const nobody = 65534;

/**
 * Node options that make the CLI's stderr say it is a terminal, as a pty
 * would, without one: what it draws there can then be read from a pipe.
 */
const stderrIsATerminal = ["--import", `data:text/javascript,${encodeURIComponent('Object.defineProperty(process.stderr, "isTTY", { value: true });')}`];

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI as a child process. Asynchronously: the service under test
 * runs in this process and must keep answering while the CLI waits. The
 * environment is only what is given (no ENTITY_VERSIONS_* leaks in).
 */
function cli(args: string[], options: { cwd: string; env?: Record<string, string>; nodeArgs?: string[]; asNobody?: boolean }): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...(options.nodeArgs ?? []), bin, ...args], {
      cwd: options.cwd,
      env: { PATH: process.env["PATH"] ?? "", ...options.env },
      stdio: ["ignore", "pipe", "pipe"],
      // Root reads files whatever their mode: a file made unreadable is unreadable to another user only.
      ...(options.asNobody === true && process.getuid?.() === 0 ? { uid: nobody, gid: nobody } : {}),
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Fails with the CLI's output when the exit code is not the one expected. */
function expectExit(run: CliRun, code: number, what: string): void {
  assert.is(run.code, code, `${what}: exit ${run.code}, expected ${code}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`);
}

/** The one JSON document a --json run prints. */
function json<T = any>(run: CliRun): T {
  return JSON.parse(run.stdout) as T;
}

/** Writes files under a folder (created). */
function write(dir: string, files: Record<string, string>): void {
  for (const [name, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), content);
  }
}

/** The package a push of `dir` uploads, packed here with the same code. */
async function expectedPackage(dir: string): Promise<Buffer> {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-expect-")), "p.tgz");
  await packTree(await hashFiles(await listSourceTree(dir)), out);
  return fs.readFileSync(out);
}


/** A CLI run left going (watch): its stdout lines as they come, and a way to stop it. */
interface CliProcess {
  /** Waits until `ready` holds of the lines printed so far (and stderr); fails with the output after `timeoutMs`. */
  until(ready: (lines: string[], stderr: string) => boolean, what: string, timeoutMs?: number): Promise<string[]>;
  /** Ends it (SIGTERM) unless it ended by itself; resolves with how it ended. */
  stop(): Promise<CliRun>;
  readonly exited: Promise<CliRun>;
}

function cliInBackground(args: string[], options: { cwd: string; env?: Record<string, string> }): CliProcess {
  const child = spawn(process.execPath, [bin, ...args], { cwd: options.cwd, env: { PATH: process.env["PATH"] ?? "", ...options.env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  let notify = () => {};
  child.stdout.on("data", (c: Buffer) => {
    stdout += c.toString();
    notify();
  });
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<CliRun>((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  void exited.then(() => notify());
  const lines = () => stdout.split("\n").filter((l) => l !== "");
  return {
    exited,
    async until(ready, what, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (!ready(lines(), stderr)) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`${what}: not seen in ${timeoutMs} ms\n--- stdout\n${stdout}\n--- stderr\n${stderr}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 100);
          notify = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      return lines();
    },
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}

/**
 * A TCP proxy to a service, whose connections can be cut and whose target
 * can be changed: a network fault and a replica swap, as a client sees
 * them. While held, it drops each connection as it comes (a service out of
 * reach), so that what happens meanwhile is certain to happen before a
 * client gets back.
 */
async function tcpProxy(target: string): Promise<{ url: string; cut(): void; hold(held: boolean): void; retarget(url: string): void; close(): Promise<void> }> {
  let to = new URL(target);
  let held = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (held) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(to.port), to.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.once("close", () => sockets.delete(s));
      s.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    hold: (value) => {
      held = value;
    },
    retarget: (url) => {
      to = new URL(url);
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Ctx {
  svc: TestService;
  work: string;
  alice: Record<string, string>;
  bob: Record<string, string>;
}

/** The CLI against a service on `backend`; the access commands need no second backend (they add no storage of their own). */
function defineCliSuite(backend: Backend, options: { accessCommands: boolean }): void {
  const s = suite<Ctx>(`${backend}: cli`, {} as Ctx);
  s.before(async (ctx) => {
    try {
      ctx.svc = await startService(backend);
    } catch (error) {
      console.error(`\n  ${backend}: cli: could not start the service:`, error);
      throw error;
    }
    ctx.work = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-"));
    ctx.alice = { ENTITY_VERSIONS_URL: ctx.svc.url, ENTITY_VERSIONS_TOKEN: await token({ sub: "alice", roles: ["publisher"] }) };
    ctx.bob = { ENTITY_VERSIONS_URL: ctx.svc.url, ENTITY_VERSIONS_TOKEN: await token({ sub: "bob", roles: ["publisher"] }) };
  });
  s.after(async (ctx) => {
    await ctx.svc?.close();
    if (ctx.work !== undefined) fs.rmSync(ctx.work, { recursive: true, force: true });
  });

  s("the push flow: dedup, a change on top, STALE_BASE, download, list, activate, rollback, delete", async ({ svc, work, alice, bob }) => {
    const entity = newEntityId("cli");
    const app = path.join(work, `${entity}-alice`);
    write(app, {
      "package.json": JSON.stringify({ name: "my-app", version: "1.0.0" }),
      "package-lock.json": JSON.stringify({ lockfileVersion: 3 }),
      "src/index.js": "console.log(1)\n",
      ".env": "SECRET=1\n",
      ".entityversionsignore": ".env\n",
      "node_modules/dep/index.js": "dependency\n",
    });
    const at = { cwd: work, env: alice };

    // A first push: created, recorded as the folder's base, manifest and lockfile sent.
    const first = await cli(["push", app, "--entity", entity, "--json"], at);
    expectExit(first, 0, "first push");
    const v1 = json(first);
    assert.is(v1.created, true);
    assert.is(v1.version.published_by, "alice");
    assert.equal(v1.version.package_json, { name: "my-app", version: "1.0.0" });
    assert.ok(v1.version.package_lock_path !== undefined, "the lockfile was uploaded and confirmed");
    assert.is(v1.version.base_version_id, undefined);
    const state = JSON.parse(fs.readFileSync(path.join(app, ".entity-versions.json"), "utf8"));
    assert.is(state.services[svc.url][entity].version_id, v1.version.id);

    // The same tree again, with the state file now in it: deduplicated, success, the same version.
    const again = await cli(["push", app, "--entity", entity], at);
    expectExit(again, 0, "repeated push");
    assert.match(again.stdout, `already published as ${v1.version.version} (id ${v1.version.id})`);
    const againJson = await cli(["push", app, "--entity", entity, "--json"], at);
    expectExit(againJson, 0, "repeated push, --json");
    assert.equal(json(againJson), { version: v1.version, created: false, already_confirmed: false });

    // Bob's folder is a copy of the tree at v1, with its record of v1 as the base.
    const bobDir = path.join(work, `${entity}-bob`);
    fs.cpSync(app, bobDir, { recursive: true });
    expectExit(await cli(["publisher", "add", entity, "bob"], at), 0, "publisher add");

    // Alice pushes a change on top of v1.
    write(app, { "src/index.js": "console.log(2)\n" });
    const second = await cli(["push", app, "--entity", entity, "--json"], at);
    expectExit(second, 0, "push of a change");
    const v2 = json(second).version;
    assert.is(v2.base_version_id, v1.version.id);
    assert.is.not(v2.source_hash, v1.version.source_hash);

    // Bob pushes his change on v1, which is no longer the tip: exit 3, with the tip and how to reconcile.
    write(bobDir, { "src/other.js": "bob\n" });
    const stale = await cli(["push", bobDir, "--entity", entity, "--activate"], { cwd: work, env: bob });
    expectExit(stale, 3, "push on a stale base");
    assert.match(stale.stderr, "(STALE_BASE)");
    assert.match(stale.stderr, `the tip of ${entity} is ${v2.version} (id ${v2.id}), published by alice at ${v2.created_at}`);
    assert.match(stale.stderr, `built on ${v1.version.id}`);
    assert.match(stale.stderr, `--base ${v2.id} --activate`, "the push printed is this one, on the tip");
    // The tip is downloaded outside the pushed tree, or the next push would pack it.
    const tipAt = /download \S+ --version-id \S+ -o (\S+)/.exec(stale.stderr)?.[1] ?? "";
    assert.ok(path.isAbsolute(tipAt) && path.relative(bobDir, tipAt).startsWith(".."), tipAt);
    assert.is(stale.stdout, "");
    const staleJson = await cli(["push", bobDir, "--entity", entity, "--json"], { cwd: work, env: bob });
    expectExit(staleJson, 3, "stale push, --json");
    assert.is(JSON.parse(staleJson.stderr).latest_version.id, v2.id);
    assert.is(staleJson.stdout, "");

    // Download v2 as Bob: the bytes are the package Alice's tree packs to; it becomes the base of Bob's folder.
    const tipFile = path.join(bobDir, "..", `${entity}-tip.tgz`);
    const download = await cli(["download", entity, "--version-id", v2.id, "-o", tipFile], { cwd: bobDir, env: bob });
    expectExit(download, 0, "download");
    assert.match(download.stdout, "verified");
    assert.ok(fs.readFileSync(tipFile).equals(await expectedPackage(app)), "downloaded bytes are the pushed package");
    // -o through a symbolic link writes the file it points at and leaves the link; a device is refused before any call.
    const real = path.join(work, `${entity}-real`, "real.tgz");
    fs.mkdirSync(path.dirname(real));
    fs.writeFileSync(real, "previous");
    const link = path.join(work, `${entity}-link.tgz`);
    fs.symlinkSync(real, link);
    expectExit(await cli(["download", entity, "--version-id", v2.id, "-o", link, "--no-track"], { cwd: bobDir, env: bob }), 0, "download through a link");
    assert.ok(fs.lstatSync(link).isSymbolicLink(), "the link is left");
    assert.ok(fs.readFileSync(real).equals(await expectedPackage(app)), "the file it points at holds the package");
    // A name as long as a file name may be (255 bytes): its scratch file's name is kept within that too.
    const longName = path.join(work, `${"é".repeat(120)}${entity.padEnd(11, "x").slice(-11)}.tgz`);
    assert.is(Buffer.byteLength(path.basename(longName)), 255);
    expectExit(await cli(["download", entity, "--version-id", v2.id, "-o", longName, "--no-track"], { cwd: bobDir, env: bob }), 0, "download to a long file name");
    assert.ok(fs.readFileSync(longName).equals(await expectedPackage(app)), "the long-named file holds the package");
    const device = await cli(["download", entity, "--version-id", v2.id, "-o", "/dev/null", "--no-track"], { cwd: bobDir, env: bob });
    expectExit(device, 2, "download to a device");
    assert.match(device.stderr, "is not a regular file");
    const onTop = await cli(["push", ".", "--entity", entity, "--json"], { cwd: bobDir, env: bob });
    expectExit(onTop, 0, "push on top of the downloaded tip");
    const v3 = json(onTop).version;
    assert.is(v3.base_version_id, v2.id);
    assert.is(v3.published_by, "bob");

    // No active version yet: download --active is "not found" (exit 4).
    const noActive = await cli(["download", entity, "--active", "-o", path.join(work, "none.tgz")], at);
    expectExit(noActive, 4, "download of the active version when there is none");
    assert.match(noActive.stderr, "(NO_ACTIVE_VERSION)");
    // The hint names the entity, so that it can be typed as it stands.
    assert.match(noActive.stderr, `entity-versions activate ${entity} VERSION_ID`);
    assert.not.match(noActive.stderr, "list ENTITY");

    // list: newest first, as a table and as the REST answer.
    const listed = await cli(["list", entity, "--json"], at);
    expectExit(listed, 0, "list --json");
    assert.equal(
      json(listed).versions.map((v: { id: string }) => v.id),
      [v3.id, v2.id, v1.version.id],
    );
    const table = await cli(["list", entity], at);
    expectExit(table, 0, "list");
    assert.match(table.stdout, /^VERSION\s+ID\s+ACTIVE/);
    assert.ok(table.stdout.indexOf(v3.version) < table.stdout.indexOf(v1.version.version), "newest first");
    // The next page's command is one that runs as printed: the same page size, and the URL a flag gave.
    const { ENTITY_VERSIONS_URL: _url, ...tokenOnly } = alice;
    const paged = await cli(["list", entity, "--limit", "1", "--url", svc.url], { cwd: work, env: tokenOnly });
    expectExit(paged, 0, "list --limit 1 --url");
    const more = /More: entity-versions (.*)$/m.exec(paged.stdout)?.[1] ?? "";
    assert.match(more, `list ${entity} --limit 1 --url ${svc.url} --page-token `);
    const nextPage = await cli(more.split(" "), { cwd: work, env: tokenOnly });
    expectExit(nextPage, 0, "the next page, as printed");
    assert.match(nextPage.stdout, v2.version);
    // A page token the service did not print is the user's argument that is wrong: exit 2, and where tokens come from.
    const forged = await cli(["list", entity, "--page-token", "not-a-token"], at);
    expectExit(forged, 2, "list --page-token of a forged token");
    assert.match(forged.stderr, "--page-token \"not-a-token\" is not a token this service printed");
    assert.match(forged.stderr, "(INVALID_ARGUMENT)");
    const forgedEvents = await cli(["events", entity, "--page-token", "not-a-token", "--json"], at);
    expectExit(forgedEvents, 2, "events --page-token of a forged token");
    assert.is(JSON.parse(forgedEvents.stderr).code, "INVALID_ARGUMENT");

    // activate with nothing active before: rollback goes to the version created before the active one, and says so.
    expectExit(await cli(["activate", entity, v3.id], at), 0, "activate");
    const rollback = await cli(["rollback", entity], at);
    expectExit(rollback, 0, "rollback");
    assert.match(rollback.stdout, `rolled back to ${v2.version} (id ${v2.id}); ${v3.version} (id ${v3.id}) was active`);
    assert.match(rollback.stdout, "created just before");
    assert.match(rollback.stdout, "no version was active before");
    // Now the events know what was active before v2: v3. Rolling back again goes there.
    const back = await cli(["rollback", entity], at);
    expectExit(back, 0, "second rollback");
    assert.match(back.stdout, `rolled back to ${v3.version} (id ${v3.id}); ${v2.version} (id ${v2.id}) was active`);
    assert.match(back.stdout, "the version that was active before");
    expectExit(await cli(["rollback", entity], at), 0, "third rollback");
    const active = await svc.restAs(bearer(alice.ENTITY_VERSIONS_TOKEN!)).get(`/api/entities/${entity}/active-version`);
    assert.is(active.body.id, v2.id);
    const get = await cli(["get", entity, v2.id, "--json"], at);
    expectExit(get, 0, "get");
    assert.is(json(get).is_active, true);

    // delete: the active version is refused (exit 1, the service's code), another is deleted.
    const refused = await cli(["delete", entity, v2.id], at);
    expectExit(refused, 1, "delete of the active version");
    assert.match(refused.stderr, "(ACTIVE_VERSION_NOT_DELETABLE)");
    expectExit(await cli(["delete", entity, v1.version.id], at), 0, "delete");
    const gone = await cli(["get", entity, v1.version.id], at);
    expectExit(gone, 4, "get of a deleted version");
    assert.match(gone.stderr, "(VERSION_NOT_FOUND)");
  });

  s("a push or download that succeeded exits 0 when its base cannot be recorded, saying so; download --json prints no signed URL", async ({ work, alice }) => {
    const entity = newEntityId("cli");
    const app = path.join(work, `${entity}-unrecorded`);
    write(app, { "package.json": JSON.stringify({ name: "my-app" }), "src/index.js": "1\n" });
    const at = { cwd: work, env: alice };
    const first = await cli(["push", app, "--entity", entity, "--json"], at);
    expectExit(first, 0, "first push");
    const v1 = json(first).version;
    // A state file the CLI cannot read, so cannot update either.
    fs.writeFileSync(path.join(app, ".entity-versions.json"), "{not json");
    write(app, { "src/index.js": "2\n" });
    const second = await cli(["push", app, "--entity", entity, "--base", v1.id, "--json"], at);
    expectExit(second, 0, "a push whose base cannot be recorded");
    const v2 = json(second).version;
    assert.is(json(second).created, true);
    assert.match(second.stderr, /^warning: .* could not be recorded as the base of the next push \(.*is not a state file this CLI wrote.*\); pass --base /);
    assert.match(second.stderr, `--base ${v2.id}`);
    const human = await cli(["push", app, "--entity", entity, "--base", v1.id], at);
    expectExit(human, 0, "the same push again, deduplicated");
    assert.match(human.stdout, "already published");
    assert.not.match(human.stdout, "The next push from here builds on it", "no claim that it was recorded");
    const download = await cli(["download", entity, "--version-id", v2.id, "-o", path.join(work, `${entity}.tgz`), "--json"], { cwd: app, env: alice });
    expectExit(download, 0, "a download whose base cannot be recorded");
    assert.match(download.stderr, /^warning: .* could not be recorded as the base of a push from this folder/);
    const answer = json(download);
    assert.is(answer.version.id, v2.id);
    assert.ok(answer.download_url.startsWith("http") && !answer.download_url.includes("?"), answer.download_url);
    assert.not.match(download.stdout, "sig=");
  });

  s("a push whose confirm answer was lost: the retry finds the version the first confirm made, and the push says it published it", async ({ svc, work, alice }) => {
    // An HTTP proxy that lets the first confirm reach the service, reads its
    // answer through, and cuts the client off instead of passing it on.
    let cut = 0;
    const proxy = http.createServer((req, res) => {
      const upstream = http.request(new URL(req.url ?? "/", svc.url), { method: req.method, headers: req.headers }, (answer) => {
        const lose = req.method === "POST" && (req.url ?? "").endsWith("/versions/confirm") && cut === 0;
        if (lose) {
          cut++;
          answer.resume().once("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    try {
      const entity = newEntityId("cli");
      const app = path.join(work, `${entity}-lost`);
      write(app, { "package.json": JSON.stringify({ name: "my-app" }), "src/index.js": "1\n" });
      const env = { ...alice, ENTITY_VERSIONS_URL: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}` };
      const pushed = await cli(["push", app, "--entity", entity, "--json"], { cwd: work, env });
      expectExit(pushed, 0, "a push whose first confirm answer was lost");
      assert.is(cut, 1, "the first confirm's answer was cut");
      const answer = json(pushed);
      assert.equal([answer.created, answer.already_confirmed], [true, true], pushed.stdout);
      const human = await cli(["list", entity, "--json"], { cwd: work, env: alice });
      assert.equal(json(human).versions.map((v: { id: string }) => v.id), [answer.version.id], "one version");
      write(app, { "src/index.js": "2\n" });
      cut = 0;
      const next = await cli(["push", app, "--entity", entity], { cwd: work, env });
      expectExit(next, 0, "the next push, its confirm answer lost too");
      assert.match(next.stdout, `Published ${entity} `);
      assert.match(next.stdout, "the first confirm's answer was lost");
      assert.match(next.stdout, `on top of ${answer.version.id}`, "the first push's version was recorded as the folder's base");
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  s("a package file written to during its push: stopped with SOURCE_CHANGED before anything is uploaded, no version made", async ({ svc, work, alice }) => {
    const entity = newEntityId("cli");
    const file = path.join(work, `${entity}.tgz`);
    fs.writeFileSync(file, Buffer.alloc(64 * 1024, 1));
    // An HTTP proxy that rewrites the file in place (same size, other bytes)
    // once the push has hashed it and asked for its upload URL.
    const proxy = http.createServer((req, res) => {
      if (req.method === "POST" && (req.url ?? "").endsWith("/versions/upload-url")) fs.writeFileSync(file, Buffer.alloc(64 * 1024, 2));
      const upstream = http.request(new URL(req.url ?? "/", svc.url), { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    try {
      const env = { ...alice, ENTITY_VERSIONS_URL: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}` };
      const pushed = await cli(["push", file, "--entity", entity, "--json"], { cwd: work, env });
      expectExit(pushed, 1, "a push of a file changed after it was hashed");
      assert.is((JSON.parse(pushed.stderr) as { code: string }).code, "SOURCE_CHANGED", pushed.stderr);
      const listed = await cli(["list", entity, "--json"], { cwd: work, env: alice });
      assert.equal(listed.code === 0 ? json(listed).versions : [], [], "no version was made");
    } finally {
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  s("with --json no progress bar is drawn, even on a terminal: stderr stays empty on success", async ({ work, alice }) => {
    const entity = newEntityId("cli");
    const dir = path.join(work, `${entity}-bar`);
    fs.mkdirSync(dir);
    const big = (name: string) => {
      const file = path.join(dir, name);
      fs.writeFileSync(file, crypto.randomBytes(1_200_000));
      return file;
    };
    const at = { cwd: dir, env: alice, nodeArgs: stderrIsATerminal };
    // Without --json the bar is drawn: the terminal stand-in works.
    const drawn = await cli(["push", big("a.bin"), "--entity", entity], at);
    expectExit(drawn, 0, "push on a terminal");
    assert.match(drawn.stderr, "\rpackage [");
    const quiet = await cli(["push", big("b.bin"), "--entity", entity, "--json"], at);
    expectExit(quiet, 0, "push --json on a terminal");
    assert.is(quiet.stderr, "");
    const download = await cli(["download", entity, "--version-id", json(quiet).version.id, "-o", "b.tgz", "--no-track", "--json"], at);
    expectExit(download, 0, "download --json on a terminal");
    assert.is(download.stderr, "");
  });

  s("source reverted to an older version's is already published, and the folder's base stays at the tip it built on", async ({ svc, work, alice }) => {
    const entity = newEntityId("cli");
    const app = path.join(work, `${entity}-revert`);
    const at = { cwd: work, env: alice };
    const baseOf = () => JSON.parse(fs.readFileSync(path.join(app, ".entity-versions.json"), "utf8")).services[svc.url][entity].version_id;
    write(app, { "f.txt": "A\n" });
    const v1 = json(await cli(["push", app, "--entity", entity, "--json"], at)).version;
    write(app, { "f.txt": "B\n" });
    const v2 = json(await cli(["push", app, "--entity", entity, "--json"], at)).version;
    // Back to A: v1's source, answered with v1; the folder still builds on v2, the tip.
    write(app, { "f.txt": "A\n" });
    const reverted = await cli(["push", app, "--entity", entity], at);
    expectExit(reverted, 0, "a push of reverted source");
    assert.match(reverted.stdout, `already published as ${v1.version}`);
    assert.match(reverted.stdout, `still builds on ${v2.id}`);
    assert.is(baseOf(), v2.id);
    // A base given with --base was never the folder's: the record is said to be left alone.
    const flagged = await cli(["push", app, "--entity", entity, "--base", v2.id], at);
    expectExit(flagged, 0, "a push of reverted source with --base");
    assert.match(flagged.stdout, "this folder's recorded base is left as it was");
    write(app, { "f.txt": "C\n" });
    const next = await cli(["push", app, "--entity", entity, "--json"], at);
    expectExit(next, 0, "the push after a revert");
    assert.is(json(next).version.base_version_id, v2.id);
    // The tip's own source, from a folder that built on an older version, moves the base to the tip.
    fs.rmSync(path.join(app, ".entity-versions.json"));
    write(app, { "f.txt": "A\n" });
    expectExit(await cli(["push", app, "--entity", entity, "--base", v1.id], at), 0, "v1's source, deduplicated");
    write(app, { "f.txt": "C\n" });
    const tipAgain = await cli(["push", app, "--entity", entity, "--base", v2.id, "--json"], at);
    expectExit(tipAgain, 0, "the tip's source");
    assert.is(baseOf(), json(next).version.id);
    // A folder with no record, whose source is an older version's: nothing is recorded its next push would be refused on.
    const fresh = path.join(work, `${entity}-fresh`);
    write(fresh, { "f.txt": "A\n" });
    const old = await cli(["push", fresh, "--entity", entity], at);
    expectExit(old, 0, "an older version's source from a folder with no base");
    assert.match(old.stdout, `already published as ${v1.version}`);
    assert.match(old.stdout, "no base is recorded for this folder; pass the tip's id as --base");
    assert.not.ok(fs.existsSync(path.join(fresh, ".entity-versions.json")), "no base recorded");
  });

  s("events, watch and activate --expect-active: each event printed once, in order, across a cut connection and a replica that stops", async ({ work }) => {
    const db = await createTestDatabase(backend);
    let svc = await startService(backend, { db, env: { AUTH_CLOCK_SKEW_SECONDS: "0" } });
    const proxy = await tcpProxy(svc.url);
    let watcher: CliProcess | undefined;
    try {
      const aliceToken = await token({ sub: "alice", roles: ["publisher"] });
      const env = { ENTITY_VERSIONS_URL: proxy.url, ENTITY_VERSIONS_TOKEN: aliceToken };
      const at = { cwd: work, env };
      const rest = svc.restAs(bearer(aliceToken));
      const entity = newEntityId("cli");
      const v1 = (await push({ rest }, entity, { setAsActive: true })).confirm!.body.version;
      const v2 = (await push({ rest }, entity, { base: v1.id })).confirm!.body.version;

      // The audit trail: the claim, v1 created and activated, v2 created; newest first.
      const listed = await cli(["events", entity, "--json"], at);
      expectExit(listed, 0, "events --json");
      assert.equal(json(listed).events.map((e: { id: string }) => e.id), ["4", "3", "2", "1"]);
      const table = await cli(["events", entity], at);
      expectExit(table, 0, "events");
      assert.match(table.stdout, /^ID\s+OCCURRED AT\s+BY\s+CHANGE/);
      assert.match(table.stdout, `activated ${v1.version} (id ${v1.id}), replacing none`);
      assert.match(table.stdout, "publisher added: alice");

      watcher = cliInBackground(["watch", entity, "--after", "2", "--json"], at);
      const ids = (lines: string[]) => lines.map((l) => JSON.parse(l) as { event?: { id: string }; bookmark?: { last_event_id: string } }).filter((m) => m.event !== undefined).map((m) => m.event!.id);
      await watcher.until((l) => ids(l).length === 2 && l.some((x) => x.includes('"bookmark":{"last_event_id":"4"}')), "events 3 and 4, then a bookmark");

      // The connection cut: the watch resumes after event 4.
      proxy.cut();
      const activated = await cli(["activate", entity, v2.id, "--expect-active", v1.id, "--json"], { cwd: work, env: { ...env, ENTITY_VERSIONS_URL: svc.url } });
      expectExit(activated, 0, "activate --expect-active (the expected one is active)");
      assert.is(json(activated).is_active, true);
      await watcher.until((l) => ids(l).includes("5"), "event 5 after the cut");

      // The replica stops (SHUTTING_DOWN); another serves the same database; the watch resumes there.
      const plain = cliInBackground(["watch", entity, "--after", "4"], at);
      await plain.until((l) => l.some((x) => x.startsWith("5 ")), "event 5, as a line of text");
      // Meanwhile a gateway answers its own 502 page, as nginx does with no upstream: the watches go on trying.
      let gatewayAnswers = 0;
      const gateway = http.createServer((_req, res) => {
        gatewayAnswers++;
        res.writeHead(502, { "content-type": "text/html" }).end("<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>");
      });
      await new Promise<void>((resolve) => gateway.listen(0, "127.0.0.1", resolve));
      proxy.retarget(`http://127.0.0.1:${(gateway.address() as net.AddressInfo).port}`);
      await svc.close();
      for (const until = Date.now() + 20_000; gatewayAnswers < 2 && Date.now() < until; ) await sleep(50);
      gateway.close();
      assert.ok(gatewayAnswers >= 2, "both watches met the gateway's 502");
      // The same container too: the database's packages are there.
      svc = await startService(backend, { db, env: { AUTH_CLOCK_SKEW_SECONDS: "0", AZURE_STORAGE_CONTAINER: svc.env["AZURE_STORAGE_CONTAINER"]! } });
      proxy.retarget(svc.url);
      proxy.cut();
      const stale = await cli(["activate", entity, v1.id, "--expect-active", v1.id], { cwd: work, env: { ...env, ENTITY_VERSIONS_URL: svc.url } });
      expectExit(stale, 3, "activate --expect-active with another version active");
      assert.match(stale.stderr, "(ACTIVE_VERSION_CHANGED)");
      assert.match(stale.stderr, "--expect-active");
      assert.match(stale.stderr, `entity-versions list ${entity}\` marks`);
      assert.is((await svc.restAs(bearer(aliceToken)).put(`/api/entities/${entity}/active-version`, { version_id: v1.id })).status, 200);
      await watcher.until((l) => ids(l).includes("6"), "event 6 after the replica changed", 30_000);
      const ended = await watcher.stop();
      assert.equal(ids(ended.stdout.split("\n").filter((l) => l !== "")), ["3", "4", "5", "6"], "each event once, in order");
      // Without --json the retry line says why, with no advice to do by hand what the watch does itself.
      const told = await plain.stop();
      assert.match(told.stderr, /The server is shutting down \(SHUTTING_DOWN\); resuming after event 5 in \d+ ms/);
      assert.not.match(told.stderr, "after_event_id");

      // --type and --count: wait for the next activation, print it, exit 0.
      watcher = cliInBackground(["watch", entity, "--type", "active_version_changed", "--count", "1"], at);
      // "From now" begins when the service has answered, which a loaded machine may take a while to see.
      await watcher.until((_lines, stderr) => stderr.includes(`watching ${entity} from now`), "the watch begun");
      assert.is((await svc.restAs(bearer(aliceToken)).post(`/api/entities/${entity}/shares`, { user_id: "bob" })).status, 200);
      assert.is((await svc.restAs(bearer(aliceToken)).put(`/api/entities/${entity}/active-version`, { version_id: v2.id })).status, 200);
      const next = await Promise.race([watcher.exited, new Promise<never>((_, reject) => setTimeout(() => reject(new Error("watch --count 1 did not exit")), 15_000))]);
      expectExit(next, 0, "watch --count 1");
      assert.equal(next.stdout.trim().split("\n").length, 1, next.stdout);
      assert.match(next.stdout, new RegExp(`^8  \\S+  activated ${v2.version} \\(id ${v2.id}\\), replacing ${v1.id}  \\(by alice\\)`));

      // An --after past the entity's events is the user's argument that is wrong: exit 2, not a failure to retry.
      const ahead = await cli(["watch", entity, "--after", "999999"], at);
      expectExit(ahead, 2, "watch --after past the last event");
      assert.match(ahead.stderr, `--after 999999 is not an event of ${entity}`);
      assert.match(ahead.stderr, `entity-versions events ${entity}`);

      // A token that expires while watching: exit 4, naming where to go on from with a new one.
      const short = await token({ sub: "alice", roles: ["publisher"], expiresIn: 6 });
      const expiring = await cli(["watch", entity, "--after", "7", "--count", "5"], { cwd: work, env: { ...env, ENTITY_VERSIONS_TOKEN: short } });
      expectExit(expiring, 4, "watch whose token expires");
      assert.match(expiring.stdout, `8  `);
      assert.match(expiring.stderr, "(TOKEN_EXPIRED)");
      assert.match(expiring.stderr, `entity-versions watch ${entity} --after 8 --count 4`, "the same watch, with what is left of its count");
    } finally {
      await watcher?.stop();
      await proxy.close();
      await svc.close();
      await db.drop();
    }
  });

  s("watch from now resumes from the bookmark it was sent: an event while the connection is down is printed once the watch is back", async ({ svc, work, alice }) => {
    const proxy = await tcpProxy(svc.url);
    let watcher: CliProcess | undefined;
    try {
      const rest = svc.restAs(bearer(alice["ENTITY_VERSIONS_TOKEN"]!));
      const entity = newEntityId("cli");
      // Events 1 and 2: the claim and v1 created.
      const v1 = (await push({ rest }, entity)).confirm!.body.version;
      watcher = cliInBackground(["watch", entity, "--json"], { cwd: work, env: { ...alice, ENTITY_VERSIONS_URL: proxy.url } });
      // From now: no event yet, only the bookmark that says where "now" is.
      const lines = await watcher.until((l) => l.length > 0, "the first bookmark");
      assert.equal(lines.map((l) => JSON.parse(l)), [{ bookmark: { last_event_id: "2" } }]);

      // The connection cut, and kept away until v1's activation (event 3) is committed: only the bookmark can bring it back.
      proxy.hold(true);
      proxy.cut();
      assert.is((await rest.put(`/api/entities/${entity}/active-version`, { version_id: v1.id })).status, 200);
      proxy.hold(false);

      const ids = (l: string[]) => l.map((x) => JSON.parse(x) as { event?: { id: string } }).filter((m) => m.event !== undefined).map((m) => m.event!.id);
      await watcher.until((l) => ids(l).length > 0, "event 3, which came while the connection was down");
      const ended = await watcher.stop();
      assert.equal(ids(ended.stdout.split("\n").filter((l) => l !== "")), ["3"], ended.stdout);
    } finally {
      await watcher?.stop();
      await proxy.close();
    }
  });

  if (options.accessCommands) s("a package file is uploaded as is, its source hash the SHA-256 of its bytes; access commands", async ({ work, alice, bob }) => {
    const entity = newEntityId("cli");
    const file = path.join(work, `${entity}.tgz`);
    fs.writeFileSync(file, Buffer.from("any bytes at all, as a prebuilt package"));
    const pushed = await cli(["push", file, "--entity", entity, "--activate", "--json"], { cwd: work, env: alice });
    expectExit(pushed, 0, "file push");
    const v = json(pushed).version;
    assert.is(v.source_hash, createHash("sha256").update(fs.readFileSync(file)).digest("hex"));
    assert.is(v.file_size_bytes, fs.statSync(file).size);
    assert.is(v.is_active, true);

    // Bob has no access yet: the entity does not exist for him (exit 4).
    const hidden = await cli(["list", entity], { cwd: work, env: bob });
    expectExit(hidden, 4, "list without access");
    assert.match(hidden.stderr, "(ENTITY_NOT_FOUND)");
    // A push refused as ENTITY_NOT_FOUND says what the token lacks: to be a publisher, or the role.
    const notPublisher = await cli(["push", file, "--entity", entity], { cwd: work, env: bob });
    expectExit(notPublisher, 4, "push by a caller who is not a publisher");
    assert.match(notPublisher.stderr, "(ENTITY_NOT_FOUND)");
    assert.match(notPublisher.stderr, `entity-versions publisher add ${entity} bob`);
    const reader = { ...bob, ENTITY_VERSIONS_TOKEN: await token({ sub: "carol", roles: [] }) };
    const noRole = await cli(["push", file, "--entity", newEntityId("cli")], { cwd: work, env: reader });
    expectExit(noRole, 4, "push without the publisher role");
    assert.match(noRole.stderr, "needs the publisher (or admin) role, and this token has no roles");
    const shared = await cli(["share", "add", entity, "bob", "--json"], { cwd: work, env: alice });
    expectExit(shared, 0, "share add");
    assert.equal(json(shared).shares, ["bob"]);
    const out = path.join(work, `${entity}-copy.tgz`);
    expectExit(await cli(["download", entity, "-o", out, "--no-track"], { cwd: work, env: bob }), 0, "download of the active version by a share");
    assert.ok(fs.readFileSync(out).equals(fs.readFileSync(file)));
    // A share may read but not publish: no access (exit 4, PERMISSION_DENIED).
    const denied = await cli(["activate", entity, v.id], { cwd: work, env: bob });
    expectExit(denied, 4, "activate by a share");
    assert.match(denied.stderr, "(PERMISSION_DENIED)");
    const store = await cli(["store", "add", entity, "--org", "acme", "--json"], { cwd: work, env: alice });
    expectExit(store, 0, "store add --org");
    assert.equal(json(store).org_stores, ["acme"]);
    const access = await cli(["access", entity], { cwd: work, env: alice });
    expectExit(access, 0, "access");
    assert.match(access.stdout, /publishers:\s+alice/);
    assert.match(access.stdout, /shared with:\s+bob/);
  });

  if (options.accessCommands) s("a package larger than the service takes is refused before it is uploaded", async ({ work }) => {
    let blobs: BlobStore | undefined;
    const small = await startService(backend, { env: { MAX_PACKAGE_BYTES: "1024", MAX_PACKAGE_JSON_VALUES: "5" }, blobStore: (store) => (blobs = store) });
    try {
      const entity = newEntityId("cli");
      const file = path.join(work, `${entity}-big.tgz`);
      fs.writeFileSync(file, Buffer.alloc(4096, 7));
      const env = { ENTITY_VERSIONS_URL: small.url, ENTITY_VERSIONS_TOKEN: await token({ sub: "alice", roles: ["publisher"] }) };
      const refused = await cli(["push", file, "--entity", entity], { cwd: work, env });
      expectExit(refused, 1, "push of a package over MAX_PACKAGE_BYTES");
      assert.match(refused.stderr, "(PACKAGE_TOO_LARGE)");
      assert.match(refused.stderr, "the package is 4.1 kB (4096 bytes), more than the 1.0 kB (1024 bytes) the service accepts; nothing was uploaded");
      assert.match(refused.stderr, "MAX_PACKAGE_BYTES");
      const staged: string[] = [];
      for await (const blob of blobs!.list(`uploads/${entity}/`)) staged.push(blob.name);
      assert.equal(staged, [], "nothing uploaded");
      // At the limit, it is taken.
      fs.writeFileSync(file, Buffer.alloc(1024, 7));
      expectExit(await cli(["push", file, "--entity", entity], { cwd: work, env }), 0, "push of a package at MAX_PACKAGE_BYTES");
      // A package.json past the service's limits: refused by the service's rule, before the upload.
      const manifested = newEntityId("cli");
      const app = path.join(work, `${manifested}-manifest`);
      write(app, { "package.json": JSON.stringify({ name: "x", dependencies: { a: "1", b: "1", c: "1" } }) });
      const tooRich = await cli(["push", app, "--entity", manifested], { cwd: work, env });
      expectExit(tooRich, 1, "push of a package.json over MAX_PACKAGE_JSON_VALUES");
      assert.match(tooRich.stderr, "package.json holds 6 JSON values");
      assert.match(tooRich.stderr, "nothing was uploaded. (INVALID_PACKAGE_JSON)");
      assert.match(tooRich.stderr, "MAX_PACKAGE_JSON_VALUES");
      const manifestStaged: string[] = [];
      for await (const blob of blobs!.list(`uploads/${manifested}/`)) manifestStaged.push(blob.name);
      assert.equal(manifestStaged, [], "nothing uploaded");
    } finally {
      await small.close();
    }
  });

  s.run();
}

/** Runs that need no service, or a service that is not there: once, not per backend. */
function defineCliBasics(): void {
  const s = suite<{ work: string }>("cli: without a service", {} as { work: string });
  s.before((ctx) => {
    ctx.work = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-basics-"));
  });
  s.after((ctx) => fs.rmSync(ctx.work, { recursive: true, force: true }));

  s("--help: the exit codes, and a command's example", async ({ work }) => {
    const top = await cli(["--help"], { cwd: work });
    expectExit(top, 0, "--help");
    assert.match(top.stdout, "3  the entity changed since you read it: STALE_BASE");
    assert.match(top.stdout, "ACTIVE_VERSION_CHANGED");
    const push = await cli(["push", "--help"], { cwd: work });
    expectExit(push, 0, "push --help");
    // `help <command>` is a request for help too, not a usage error.
    const helpList = await cli(["help", "list", "--json"], { cwd: work });
    expectExit(helpList, 0, "help list");
    assert.is(helpList.stderr, "");
    assert.match(push.stdout, "$ entity-versions push ./my-app --entity my-app");
    const watch = await cli(["watch", "--help"], { cwd: work });
    expectExit(watch, 0, "watch --help");
    assert.match(watch.stdout, "--type ACTIVE_VERSION_CHANGED --count 1");
    // watch --json prints a line per message, not one document.
    assert.match(watch.stdout, "newline-delimited JSON on stdout");
    assert.not.match(watch.stdout, "exactly one JSON document");
    const badType = await cli(["watch", "my-app", "--type", "VERSION_MOVED"], { cwd: work });
    expectExit(badType, 2, "watch --type with no such type");
    assert.match(badType.stderr, "an event type is one of VERSION_CREATED");
  });

  s("an empty path to push (an unset variable) is a usage error, never the working folder; output that cannot be written is an error, not a stack trace", async ({ work }) => {
    const empty = await cli(["push", "", "--entity", "my-app"], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" } });
    expectExit(empty, 2, "push \"\"");
    assert.match(empty.stderr, "the path to push is empty");
    const full = await new Promise<CliRun>((resolve, reject) => {
      const out = fs.openSync("/dev/full", "w");
      const child = spawn(process.execPath, [bin, "--help"], { cwd: work, env: { PATH: process.env["PATH"] ?? "" }, stdio: ["ignore", out, "pipe"] });
      let stderr = "";
      child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
      child.once("error", reject);
      child.once("close", (code) => {
        fs.closeSync(out);
        resolve({ code, stdout: "", stderr });
      });
    });
    expectExit(full, 1, "stdout on a full device");
    assert.match(full.stderr, "error: cannot write the output: ");
    assert.not.match(full.stderr, "    at ");
  });

  s("a bad entity id is a usage error (exit 2) before any call", async ({ work }) => {
    const run = await cli(["list", "bad id!"], { cwd: work, env: { ENTITY_VERSIONS_TOKEN: "unused" } });
    expectExit(run, 2, "bad entity id");
    assert.match(run.stderr, "entity ids are 1-128 ASCII letters");
    expectExit(await cli(["push", ".", "--entity", "-x"], { cwd: work }), 2, "bad --entity");
    expectExit(await cli(["push", ".", "--entity", "ok", "--version", "2026.02.30-000000"], { cwd: work }), 2, "impossible --version");
    expectExit(await cli(["frobnicate"], { cwd: work }), 2, "unknown command");
    const missing = await cli(["push", "."], { cwd: work });
    expectExit(missing, 2, "push without --entity");
    assert.match(missing.stderr, "required option '--entity <id>' not specified");
    assert.match(missing.stderr, 'see "entity-versions push --help" for the command\'s options and an example');
    const nested = await cli(["share", "add"], { cwd: work });
    expectExit(nested, 2, "share add without arguments");
    assert.match(nested.stderr, 'see "entity-versions share add --help"');
    const badUser = await cli(["share", "add", "my-app", "bob smith"], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" } });
    expectExit(badUser, 2, "a user id with a space");
    assert.match(badUser.stderr, "user and organization ids are 1-255 printable characters");
    expectExit(await cli(["store", "add", "my-app", "--org", "a b"], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" } }), 2, "an org id with a space");
    const intoFolder = await cli(["download", "my-app", "-o", "."], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" } });
    expectExit(intoFolder, 2, "download -o a folder");
    assert.match(intoFolder.stderr, "-o . is a folder: name the file to write, e.g. -o my-app.tgz");
    // --expect-active "" (only if none is active) is an argument, not a malformed id: it reaches the service.
    const none = await cli(["activate", "my-app", "0b5c2f0e", "--expect-active", ""], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" } });
    expectExit(none, 1, 'activate --expect-active ""');
    assert.match(none.stderr, "(SERVICE_UNREACHABLE)");
    // With --json, a usage error is the one JSON document on stderr, as every other error.
    const asJson = await cli(["list", "my-app", "--json", "--limit", "x"], { cwd: work });
    expectExit(asJson, 2, "--json with a bad --limit");
    const body = JSON.parse(asJson.stderr) as { error: string; code: string };
    assert.is(body.code, "INVALID_ARGUMENT");
    assert.match(body.error, "--limit");
  });

  s("no token anywhere: a clear message and exit 4", async ({ work }) => {
    const run = await cli(["list", "my-app"], { cwd: work, env: { ENTITY_VERSIONS_URL: "http://127.0.0.1:9" } });
    expectExit(run, 4, "no token");
    assert.match(run.stderr, "(NO_TOKEN)");
    assert.match(run.stderr, "ENTITY_VERSIONS_TOKEN");
    // ./data/dev-token, as `npm start` writes it, is the last resort.
    write(work, { "data/dev-token": `${await token({ sub: "dev", roles: ["publisher", "admin"], orgs: ["acme"] })}\n` });
    const who = await cli(["whoami"], { cwd: work });
    expectExit(who, 0, "whoami with ./data/dev-token");
    assert.match(who.stdout, /user:\s+dev/);
    assert.match(who.stdout, /roles:\s+publisher, admin/);
    assert.match(who.stdout, /token:\s+from \.\/data\/dev-token/);
    // An expired token: its claims are shown, and the exit says it is not usable.
    const expired = await token({ sub: "dev", issuedAtIn: -7200, expiresIn: -60 });
    const late = await cli(["whoami", "--token", expired], { cwd: work });
    expectExit(late, 4, "whoami with an expired token");
    assert.match(late.stdout, /EXPIRED: get a new token/);
    assert.match(late.stderr, "(TOKEN_EXPIRED)");
    const lateJson = await cli(["whoami", "--json", "--token", expired], { cwd: work });
    expectExit(lateJson, 4, "whoami --json with an expired token");
    assert.is((JSON.parse(lateJson.stdout) as { expired: boolean }).expired, true);
    assert.is((JSON.parse(lateJson.stderr) as { code: string }).code, "TOKEN_EXPIRED");
    // Claims the service would refuse, judged by the service's own rule.
    const spaced = await cli(["whoami", "--token", await token({ sub: "a b" })], { cwd: work });
    expectExit(spaced, 4, "whoami with a sub the service refuses");
    assert.match(spaced.stderr, "the service refuses this token's claims (sub must be a user id of 1 to 255 printable characters without spaces)");
    assert.match(spaced.stderr, "(TOKEN_CLAIMS_INVALID)");
    fs.rmSync(path.join(work, "data"), { recursive: true });
  });

  s("a file or folder that cannot be read is named by its path in the tree, with the ignore line that leaves it out; a download into a folder that cannot be written fails before any call", async ({ work }) => {
    const env = { ENTITY_VERSIONS_URL: "http://127.0.0.1:9", ENTITY_VERSIONS_TOKEN: "unused" };
    // Every folder on the way readable to the user the CLI runs as; the one file or folder made unreadable is not.
    const top = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-unreadable-"));
    fs.chmodSync(top, 0o755);
    const app = path.join(top, "app");
    write(app, { a: "a\n", b: "b\n", "sub/c": "c\n" });
    fs.chmodSync(path.join(app, "b"), 0o000);
    const at = { cwd: top, env, asNobody: true };
    try {
      const file = await cli(["push", "app", "--entity", "my-app"], at);
      expectExit(file, 1, "push with an unreadable file");
      assert.match(file.stderr, "error: cannot read b (EACCES): make it readable, or add /b to .entityversionsignore. (SOURCE_UNREADABLE)");
      assert.not.match(file.stderr, top, "no absolute path, no syscall");
      const asJson = await cli(["push", "app", "--entity", "my-app", "--json"], at);
      expectExit(asJson, 1, "push --json with an unreadable file");
      assert.is((JSON.parse(asJson.stderr) as { code: string }).code, "SOURCE_UNREADABLE");
      fs.chmodSync(path.join(app, "b"), 0o644);
      fs.chmodSync(path.join(app, "sub"), 0o000);
      const folder = await cli(["push", "app", "--entity", "my-app"], at);
      expectExit(folder, 1, "push with an unreadable folder");
      assert.match(folder.stderr, "error: cannot read sub (EACCES): make it readable, or add /sub to .entityversionsignore. (SOURCE_UNREADABLE)");
      // The way out it names works: the folder ignored, the push goes on to the service (here, not there).
      write(app, { ".entityversionsignore": "/sub\n" });
      const ignored = await cli(["push", "app", "--entity", "my-app"], at);
      expectExit(ignored, 1, "push with the unreadable folder ignored");
      assert.match(ignored.stderr, "(SERVICE_UNREACHABLE)");
      fs.chmodSync(path.join(app, "sub"), 0o755);
      // The pushed folder itself, which no ignore line leaves out (its ignore file is not what to blame).
      fs.chmodSync(app, 0o000);
      const whole = await cli(["push", "app", "--entity", "my-app"], at);
      expectExit(whole, 1, "push of an unreadable folder");
      assert.match(whole.stderr, `error: cannot read ${app} (EACCES): make it readable, or push another folder. (SOURCE_UNREADABLE)`);
      fs.chmodSync(app, 0o755);

      const readOnly = path.join(top, "ro");
      fs.mkdirSync(readOnly, { mode: 0o555 });
      fs.chmodSync(readOnly, 0o555);
      const download = await cli(["download", "my-app", "-o", "x.tgz"], { ...at, cwd: readOnly });
      expectExit(download, 2, "download into a read-only folder");
      assert.match(download.stderr, `error: cannot write in ${readOnly} (the folder of -o x.tgz): choose a writable folder. (INVALID_ARGUMENT)`);
      assert.not.match(download.stderr, ".part");
    } finally {
      fs.rmSync(top, { recursive: true, force: true });
    }

    const device = await cli(["push", "/dev/null", "--entity", "my-app"], { cwd: work, env });
    expectExit(device, 2, "push /dev/null");
    assert.match(device.stderr, "/dev/null is neither a directory nor a file (a device, a pipe, a socket): push a folder (or a single file).");
  });

  s("the service unreachable: the URL named, how to change it, exit 1", async ({ work }) => {
    const port = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const url = `http://127.0.0.1:${port}`;
    const run = await cli(["list", "my-app"], { cwd: work, env: { ENTITY_VERSIONS_URL: url, ENTITY_VERSIONS_TOKEN: "any" } });
    expectExit(run, 1, "unreachable service");
    assert.match(run.stderr, `cannot reach the entity-versions service at ${url} (ECONNREFUSED)`);
    assert.match(run.stderr, "ENTITY_VERSIONS_URL");
    assert.match(run.stderr, "(SERVICE_UNREACHABLE)");
    assert.not.match(run.stderr, "retrying", "a refused connection is reported at once");
    assert.is(run.stdout, "");
  });

  s.run();
}

defineCliBasics();
defineCliSuite("sqlite", { accessCommands: true });
if (await mysqlAvailable()) defineCliSuite("mysql", { accessCommands: false });

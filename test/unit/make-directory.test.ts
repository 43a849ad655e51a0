import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { makeDirectory } from "../../src/ops/make-directory.js";
import { startupHint } from "../../src/ops/startup-hint.js";

const settings = { host: "127.0.0.1", port: 8080, databaseKind: "sqlite" as const };
const fresh = () => fs.mkdtempSync(path.join(os.tmpdir(), "ev-mkdir-"));

/** The error makeDirectory throws, with the hint a start that stopped on it prints. */
function failing(dir: string) {
  try {
    makeDirectory(dir);
  } catch (error) {
    const { code, path: at } = error as NodeJS.ErrnoException;
    return { code, path: at, hint: startupHint(error, settings) };
  }
  throw new Error(`made ${dir}, which was to fail`);
}

/** The same, in a child process under `command` (another user, a mount namespace): what it printed. */
function failingIn(command: string[], dir: string, options: { uid?: number; gid?: number; timeout?: number } = {}) {
  const script = `
    import { makeDirectory } from ${JSON.stringify(path.resolve("src/ops/make-directory.ts"))};
    import { startupHint } from ${JSON.stringify(path.resolve("src/ops/startup-hint.ts"))};
    try { makeDirectory(${JSON.stringify(dir)}); console.log("{}"); }
    catch (error) { console.log(JSON.stringify({ code: error.code, path: error.path, hint: startupHint(error, ${JSON.stringify(settings)}) })); }
  `;
  const run = spawnSync(command[0]!, [...command.slice(1), process.execPath, "--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", ...options });
  return { status: run.status, stderr: run.stderr, result: run.status === 0 ? (JSON.parse(run.stdout.trim().split("\n").pop()!) as { code?: string; path?: string; hint?: string }) : undefined };
}

test("folders that exist, or do not yet, are made as a recursive mkdir makes them", () => {
  const dir = path.join(fresh(), "a", "b", "c");
  makeDirectory(dir);
  assert.ok(fs.statSync(dir).isDirectory());
  makeDirectory(dir);
  // Through a link to a folder.
  const link = path.join(fresh(), "link");
  fs.symlinkSync(path.dirname(dir), link);
  makeDirectory(path.join(link, "d", "e"));
  assert.ok(fs.statSync(path.join(path.dirname(dir), "d", "e")).isDirectory());
});

test("a file in place of a folder further up is named, not the folder asked for", () => {
  const file = path.join(fresh(), "file");
  fs.writeFileSync(file, "");
  for (const dir of [path.join(file, "data"), path.join(file, "a", "b")]) {
    const { code, path: at, hint } = failing(dir);
    assert.is(code, "ENOTDIR");
    assert.is(at, file);
    assert.match(hint, `(${file} is a file where a folder is needed: set DATA_DIR to a folder)`);
  }
  assert.is(failing(file).path, file, "the folder asked for is itself a file");
});

test("a link to a folder that does not exist (a disk not mounted) is named, with where it leads", () => {
  const base = fresh();
  const link = path.join(base, "data");
  fs.symlinkSync(path.join(base, "unmounted", "data"), link);
  const { code, path: at, hint } = failing(path.join(link, "ev"));
  assert.is(code, "ENOENT");
  assert.is(at, link);
  assert.match(hint, `(${link} is a link to ${path.join(base, "unmounted", "data")}, which does not exist: create that folder`);
});

test("a folder on a read-only file system (which Node's recursive mkdir reports as ENOENT) gets the hint, naming the folder that refuses", () => {
  const mountPoint = fresh();
  const dir = path.join(mountPoint, "app", "data");
  // A read-only file system of its own, in a mount namespace: root may make one, other users where user namespaces are allowed.
  const inNamespace = process.getuid?.() === 0 ? ["unshare", "--mount"] : ["unshare", "--user", "--map-root-user", "--mount"];
  const command = [...inNamespace, "sh", "-c", `mount -t tmpfs -o ro tmpfs "$0" && exec "$@"`, mountPoint];
  if (spawnSync(command[0]!, [...command.slice(1), "true"]).status !== 0) {
    console.log("(skipped: no mount namespace may be made here)");
    return;
  }
  const { status, stderr, result } = failingIn(command, dir);
  assert.is(status, 0, stderr);
  assert.equal(result, {
    code: "EROFS",
    path: path.join(mountPoint, "app"),
    hint: ` (${mountPoint} is on a read-only file system: set DATA_DIR, or DATABASE_URL's sqlite: path, to a folder it may write)`,
  });
});

test("a folder this user may not write is named: the one the new folder would go in", () => {
  const parent = path.join(fresh(), "readonly");
  fs.mkdirSync(parent, { mode: 0o555 });
  fs.chmodSync(parent, 0o555);
  const dir = path.join(parent, "app", "data");
  const expected = { code: "EACCES", path: path.join(parent, "app"), hint: ` (this user may not write ${parent}: set DATA_DIR, or DATABASE_URL's sqlite: path, to a folder it may write)` };
  if (process.getuid?.() !== 0) {
    assert.equal(failing(dir), expected);
    return;
  }
  // Root writes whatever the mode says: tried as nobody instead.
  fs.chmodSync(path.dirname(parent), 0o755);
  const { status, stderr, result } = failingIn(["env"], dir, { uid: 65534, gid: 65534 });
  if (status !== 0 && /EACCES|ERR_MODULE_NOT_FOUND/.test(stderr)) {
    console.log("(skipped: user nobody may not read this checkout)");
    return;
  }
  assert.is(status, 0, stderr);
  assert.equal(result, expected);
});

test("a folder under /proc, where Node's recursive mkdir loops for ever, fails at once", () => {
  // In a child with a bound: a hang would hold the run, not fail it.
  const { status, result } = failingIn(["env"], "/proc/ev-mkdir-test/data", { timeout: 20_000 });
  assert.is(status, 0, "the child ended within its bound");
  assert.is(result?.code, "ENOENT");
  assert.is(result?.path, "/proc/ev-mkdir-test");
});

test.run();

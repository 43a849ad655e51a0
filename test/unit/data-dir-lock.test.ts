import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { DataDirInUseError, lockDataDir } from "../../src/ops/data-dir-lock.js";

const fresh = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-lock-")), "data");
const pidFile = (dir: string) => path.join(dir, "service.pid");

test("the first process claims the directory, and gives it back", () => {
  const dir = fresh();
  const lock = lockDataDir(dir);
  assert.is(fs.readFileSync(pidFile(dir), "utf8").trim(), String(process.pid));
  const again = lockDataDir(dir);
  again.release();
  assert.ok(fs.existsSync(pidFile(dir)), "a second claim in the same process, given back, leaves the first's");
  assert.is(lock.lost(), undefined);
  lock.release();
  assert.not.ok(fs.existsSync(pidFile(dir)));
  assert.is(lock.lost(), undefined, "a claim given back is not lost");
});

test("one folder named two ways (absolute, relative) is one claim's count: giving one back leaves the other held", () => {
  const dir = fresh();
  const absolute = lockDataDir(dir);
  const relative = lockDataDir(path.relative(process.cwd(), dir));
  absolute.release();
  assert.ok(fs.existsSync(pidFile(dir)));
  assert.is(relative.lost(), undefined);
  relative.release();
  assert.not.ok(fs.existsSync(pidFile(dir)));
});

test("a directory deleted (or taken over) under the running service is noticed, naming what happened", () => {
  const dir = fresh();
  const lock = lockDataDir(dir);
  fs.rmSync(dir, { recursive: true });
  assert.match(lock.lost() ?? "", `DATA_DIR ${dir} was deleted (its service.pid is gone) while the service ran`);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(pidFile(dir), "4242\n");
  assert.match(lock.lost() ?? "", "was taken over by process 4242");
  lock.release();
  assert.ok(fs.existsSync(pidFile(dir)), "another process's file is left alone");
});

test("a process out of file descriptors does not take its folder for deleted", () => {
  const dir = fresh();
  const script = `
    import fs from "node:fs";
    import { lockDataDir } from ${JSON.stringify(path.resolve("src/ops/data-dir-lock.ts"))};
    const lock = lockDataDir(${JSON.stringify(dir)});
    const held = [];
    try { for (;;) held.push(fs.openSync("/dev/null", "r")); } catch (error) { if (error.code !== "EMFILE") throw error; }
    const lost = lock.lost();
    for (const fd of held) fs.closeSync(fd);
    lock.release();
    console.log(JSON.stringify({ opened: held.length, lost: lost ?? null }));
  `;
  const run = spawnSync("sh", ["-c", `ulimit -n 256 && exec "${process.execPath}" --import tsx --input-type=module -e "$0"`, script], { encoding: "utf8" });
  assert.is(run.status, 0, run.stderr);
  const result = JSON.parse(run.stdout.trim().split("\n").pop()!) as { opened: number; lost: string | null };
  assert.ok(result.opened > 0, "the process ran out of descriptors");
  assert.is(result.lost, null);
});

test("a pid file that cannot be read is not taken over: whose it is cannot be told", () => {
  const dir = fresh();
  fs.mkdirSync(pidFile(dir), { recursive: true });
  assert.throws(() => lockDataDir(dir), (error: Error) => error instanceof DataDirInUseError && /exists but cannot be read/.test(error.message));
  assert.ok(fs.statSync(pidFile(dir)).isDirectory(), "left as it was");
});

test("a directory another live process holds is refused, naming it and what to do", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  const other = spawn("sleep", ["30"], { stdio: "ignore" });
  try {
    fs.writeFileSync(pidFile(dir), `${other.pid}\n`);
    try {
      lockDataDir(dir);
      assert.unreachable("claimed a directory a live process holds");
    } catch (error) {
      assert.instance(error, DataDirInUseError);
      assert.match((error as Error).message, `in use by another process (pid ${other.pid}): stop it, or give this one its own DATA_DIR`);
    }
    assert.is(fs.readFileSync(pidFile(dir), "utf8").trim(), String(other.pid), "left as it was");
  } finally {
    other.kill();
  }
});

test("a file left by a process that no longer runs is taken over", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  const gone = spawnSync("true").pid;
  fs.writeFileSync(pidFile(dir), `${gone}\n`);
  const lock = lockDataDir(dir);
  assert.is(fs.readFileSync(pidFile(dir), "utf8").trim(), String(process.pid));
  lock.release();
});

test.run();

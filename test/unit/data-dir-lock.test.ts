import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { DataDirInUseError, lockDataDir, ServicePidError } from "../../src/ops/data-dir-lock.js";

const fresh = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-lock-")), "data");
const pidFile = (dir: string) => path.join(dir, "service.pid");
/** The pid on its first line, as other tools read a pid file. */
const pidIn = (dir: string) => fs.readFileSync(pidFile(dir), "utf8").split("\n")[0];

test("the first process claims the directory, and gives it back", () => {
  const dir = fresh();
  const lock = lockDataDir(dir);
  assert.is(pidIn(dir), String(process.pid));
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

test("a pid file that is a folder is not taken over, and the start says what it is and what to do", () => {
  const dir = fresh();
  fs.mkdirSync(pidFile(dir), { recursive: true });
  assert.throws(() => lockDataDir(dir), (error: Error) => error instanceof ServicePidError && error.message.includes(`${pidFile(dir)} is a folder, not the plain file a service writes there. If no service runs on this DATA_DIR, delete ${pidFile(dir)}`));
  assert.ok(fs.statSync(pidFile(dir)).isDirectory(), "left as it was");
});

test("a pid file that is a link to nothing is refused at once, saying so, not retried as a takeover under way", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  fs.symlinkSync(path.join(dir, "gone"), pidFile(dir));
  const startedAt = Date.now();
  try {
    lockDataDir(dir);
    assert.unreachable("claimed through a link");
  } catch (error) {
    assert.instance(error, ServicePidError, String(error));
    assert.match((error as Error).message, `${pidFile(dir)} is a symbolic link to ${path.join(dir, "gone")}, which does not exist, not the plain file a service writes there`);
  }
  assert.ok(Date.now() - startedAt < 500, `refused after ${Date.now() - startedAt} ms`);
  assert.not.ok(fs.existsSync(`${pidFile(dir)}.takeover`), "no takeover file named, none left");
  assert.is(fs.readlinkSync(pidFile(dir)), path.join(dir, "gone"), "left as it was");
});

test("a stale pid file of another user in a folder where only a file's owner may delete it (sticky, as /tmp) names that and who must delete it", () => {
  // Another user's file needs two users: root makes it, a child run as nobody meets it.
  if (process.getuid?.() !== 0) {
    console.log("(skipped: needs root, to make a file of another user)");
    return;
  }
  const base = fs.mkdtempSync(path.join(os.tmpdir(), "ev-lock-sticky-"));
  fs.chmodSync(base, 0o755);
  const dir = path.join(base, "data");
  fs.mkdirSync(dir);
  fs.chmodSync(dir, 0o1777);
  fs.writeFileSync(pidFile(dir), `${spawnSync("true").pid}\n`);
  const script = `
    import { lockDataDir } from ${JSON.stringify(path.resolve("src/ops/data-dir-lock.ts"))};
    try { lockDataDir(${JSON.stringify(dir)}); console.log("took it"); } catch (error) { console.log(error.name + ": " + error.message); }
  `;
  const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", uid: 65534, gid: 65534 });
  assert.is(run.status, 0, run.stderr);
  assert.match(run.stdout, `ServicePidError: DATA_DIR ${dir} holds a stale service.pid (pid `);
  assert.match(run.stdout, `which this user may not delete (EPERM): it belongs to another user, in a folder where only a file's owner may delete it`);
  assert.match(run.stdout, `That user (or root) must delete ${pidFile(dir)}`);
  assert.not.match(run.stdout, "folder is needed");
  assert.equal(fs.readdirSync(dir), ["service.pid"], "the takeover file and the claim's own file are removed");
  fs.rmSync(base, { recursive: true, force: true });
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
  assert.is(pidIn(dir), String(process.pid));
  lock.release();
});

// Linux: what tells a process from a later one given its pid. Read here as
// the kernel documents it, not by the code under test: field 22 of
// /proc/<pid>/stat, counted after the command's name, which may hold spaces
// and parentheses.
const linux = fs.existsSync("/proc/self/stat");
const startOf = (pid: number) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!;
};
const bootId = () => fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();

/** A service's claim held by a child process run under `command` (node by default), until killed. */
async function holder(dir: string, command: string[] = [process.execPath]) {
  const script = `
    import { lockDataDir } from ${JSON.stringify(path.resolve("src/ops/data-dir-lock.ts"))};
    lockDataDir(${JSON.stringify(dir)});
    console.log("locked");
    setInterval(() => {}, 1000);
  `;
  const child = spawn(command[0]!, [...command.slice(1), "--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (chunk: Buffer) => chunk.toString().includes("locked") && resolve());
    child.on("exit", (code) => reject(new Error(`the holder exited (${code}) before it held ${dir}: ${stderr}`)));
  });
  return child;
}

const refused = (dir: string, why: string) =>
  assert.throws(() => lockDataDir(dir), (error: Error) => error instanceof DataDirInUseError && error.message.includes("is in use by another process"), why);

test("a pid file naming a live process that is not the service (its pid reused after a crash) is taken over; the service it names is refused", async () => {
  if (!linux) return;
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  const other = spawn("sleep", ["30"], { stdio: "ignore" });
  try {
    const otherStart = startOf(other.pid!);
    for (const [written, why] of [
      [`${other.pid}\nstart=${Number(otherStart) + 1}\n`, "another process that started later under the same pid"],
      [`${other.pid}\nstart=${otherStart}\nboot=00000000-0000-0000-0000-000000000000\n`, "a process of an earlier boot"],
      [`${process.pid}\nstart=${Number(startOf(process.pid)) - 1}\n`, "this very process's pid, of an earlier one"],
      [`1\nstart=${Number(startOf(1)) + 1}\n`, "pid 1, which always runs"],
    ] as const) {
      fs.writeFileSync(pidFile(dir), written);
      const lock = lockDataDir(dir);
      assert.is(fs.readFileSync(pidFile(dir), "utf8"), `${process.pid}\nstart=${startOf(process.pid)}\nboot=${bootId()}\npidns=${fs.readlinkSync("/proc/self/ns/pid")}\n`, why);
      lock.release();
      assert.not.ok(fs.existsSync(pidFile(dir)), why);
    }
    // The same process as it is: still in use.
    fs.writeFileSync(pidFile(dir), `${other.pid}\nstart=${otherStart}\nboot=${bootId()}\n`);
    refused(dir, "the process the file names runs");
    assert.equal(fs.readdirSync(dir), ["service.pid"], "left as it was, nothing set aside");
  } finally {
    other.kill();
  }
});

test("a running service's claim says when it started, read past a command name with spaces and parentheses, and is refused to a second start", async () => {
  if (!linux) return;
  const dir = fresh();
  // A command name that fools a reading of /proc/<pid>/stat split at spaces or cut at the first ")".
  const named = path.join(path.dirname(dir), "ev) 1 2 (x");
  fs.symlinkSync(process.execPath, named);
  const child = await holder(dir, [named]);
  try {
    assert.is(fs.readFileSync(pidFile(dir), "utf8").split("\n").slice(0, 2).join("\n"), `${child.pid}\nstart=${startOf(child.pid!)}`);
    refused(dir, "a second start while the first runs");
  } finally {
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
  }
  lockDataDir(dir).release();
});

test("a claim left by a service killed in a container (pid 1 of its own pid namespace) is taken over from the host; while it runs, it is refused", async () => {
  // Needs privilege to make a pid namespace (root here; not so for every user).
  if (!linux || spawnSync("unshare", ["--pid", "--fork", "true"]).status !== 0) {
    console.log("(skipped: unshare --pid is not permitted here)");
    return;
  }
  const dir = fresh();
  const child = await holder(dir, ["unshare", "--pid", "--fork", "--kill-child", process.execPath]);
  try {
    assert.is(pidIn(dir), "1", "the service is pid 1 of its namespace");
    assert.throws(() => lockDataDir(dir), (error: Error) => error instanceof DataDirInUseError && error.message.includes("(pid 1 in another pid namespace"));
  } finally {
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
  }
  // --kill-child ends the namespace's pid 1 as unshare dies, not at once.
  let lock;
  for (let waited = 0; lock === undefined; waited += 50) {
    try {
      lock = lockDataDir(dir);
    } catch (error) {
      if (!(error instanceof DataDirInUseError) || waited > 5000) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  assert.is(pidIn(dir), String(process.pid));
  lock.release();
});

test("an empty pid file (another start's claim, made but not yet written) is waited on, not taken over at once", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(pidFile(dir), "");
  const other = spawn("sleep", ["30"], { stdio: "ignore" });
  // That start writes its pid a moment later.
  const writer = spawn("sh", ["-c", `sleep 0.1 && printf '%s\n' ${other.pid} > "$0"`, pidFile(dir)], { stdio: "ignore" });
  try {
    refused(dir, "the claim written meanwhile names a live process");
  } finally {
    other.kill();
    writer.kill();
  }
  // One that stays empty was left by a start killed between the two steps.
  fs.writeFileSync(pidFile(dir), "");
  lockDataDir(dir).release();
});

test("an empty pid file seen after a long wait on another start's takeover is still waited on, not taken for a killed start's and removed", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  // A stale claim, which another start (the shell) is taking over: it holds
  // the takeover file, then, 0.6 s on, puts its claim in place, created (an
  // earlier version made a claim in two steps) but written only 0.3 s later.
  // Meanwhile this start has waited on the takeover some 60 times.
  fs.writeFileSync(pidFile(dir), `${spawnSync("true").pid}\n`);
  const other = spawn(
    "sh",
    ["-c", `printf '%s\n' $$ > "$0.takeover"; sleep 0.6; : > "$0"; rm "$0.takeover"; sleep 0.3; printf '%s\n' $$ > "$0"; exec sleep 30`, pidFile(dir)],
    { stdio: "ignore" },
  );
  try {
    for (let waited = 0; !fs.existsSync(`${pidFile(dir)}.takeover`) && waited < 5000; waited += 10) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    refused(dir, "the other start's claim, empty for a moment, names a live process once written");
    assert.is(pidIn(dir), String(other.pid), "the other start's claim is left as it is");
  } finally {
    other.kill();
  }
});

test("an empty pid file left long ago (by an earlier version's start, killed) is taken over at once; a claim is linked in place whole, leaving no other file", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  // Left by a start of an earlier version killed between creating its claim and writing it.
  fs.writeFileSync(pidFile(dir), "");
  const longAgo = new Date(Date.now() - 60_000);
  fs.utimesSync(pidFile(dir), longAgo, longAgo);
  const startedAt = Date.now();
  const lock = lockDataDir(dir);
  assert.ok(Date.now() - startedAt < 500, `taken over in ${Date.now() - startedAt} ms, not waited on`);
  assert.is(pidIn(dir), String(process.pid));
  assert.is(fs.statSync(pidFile(dir)).nlink, 1, "the file it was written as is gone");
  assert.equal(fs.readdirSync(dir), ["service.pid"]);
  lock.release();
  assert.equal(fs.readdirSync(dir), []);
});

test("a claim removes what a start killed between writing a file and linking it left (its *.tmp), not a live start's fresh one nor anything else", () => {
  const dir = fresh();
  fs.mkdirSync(dir, { recursive: true });
  const old = new Date(Date.now() - 120_000);
  const left = ["service.pid.4242-0a1b2c3d.tmp", "page-token-secret.77-deadbeef.tmp"];
  for (const name of left) {
    fs.writeFileSync(path.join(dir, name), "x");
    fs.utimesSync(path.join(dir, name), old, old);
  }
  const kept = ["service.pid.4243-00ff00ff.tmp", "notes.tmp", "service.pid.x-0a1b2c3d.tmp"];
  for (const name of kept) fs.writeFileSync(path.join(dir, name), "x");
  fs.utimesSync(path.join(dir, "notes.tmp"), old, old);
  fs.utimesSync(path.join(dir, "service.pid.x-0a1b2c3d.tmp"), old, old);
  const lock = lockDataDir(dir);
  try {
    for (const name of left) assert.not.ok(fs.existsSync(path.join(dir, name)), `${name} is removed`);
    for (const name of kept) assert.ok(fs.existsSync(path.join(dir, name)), `${name} is kept`);
  } finally {
    lock.release();
  }
});

test("starts that find the same stale file at once: one takes it over, the others are refused", async () => {
  const rounds = 20;
  const base = fs.mkdtempSync(path.join(os.tmpdir(), "ev-lock-race-"));
  for (let round = 0; round < rounds; round++) {
    fs.mkdirSync(path.join(base, String(round)));
    // Half of them empty: left by an earlier version's start killed between creating and writing it.
    const left = path.join(base, String(round), "service.pid");
    fs.writeFileSync(left, round % 2 === 0 ? `${spawnSync("true").pid}\n` : "");
    fs.utimesSync(left, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
  }
  // Each process claims folder r at the same moment as the others (a busy
  // wait: a timer's lateness would spread them), and holds what it took
  // until all are done: a claim of one that ended would rightly be taken over.
  const startAt = Date.now() + 3000;
  const script = `
    import { lockDataDir } from ${JSON.stringify(path.resolve("src/ops/data-dir-lock.ts"))};
    for (let round = 0; round < ${rounds}; round++) {
      while (Date.now() < ${startAt} + round * 100) {}
      try { lockDataDir(${JSON.stringify(base)} + "/" + round); console.log(round + " took"); }
      catch (error) { console.log(round + " " + error.name); }
    }
    process.stdin.on("end", () => process.exit()).resume();
  `;
  const children = Array.from({ length: 4 }, () => spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["pipe", "pipe", "inherit"] }));
  const runs = await Promise.all(
    children.map(async (child) => {
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      await new Promise<void>((resolve, reject) => {
        child.stdout.on("data", () => out.trim().split("\n").length === rounds && resolve());
        child.once("exit", () => reject(new Error(`a claimer exited before its ${rounds} rounds: ${out}`)));
      });
      return out;
    }),
  ).finally(() => children.forEach((child) => child.stdin.end()));
  const lines = runs.flatMap((out) => out.trim().split("\n"));
  assert.is(lines.length, 4 * rounds, lines.join("\n"));
  for (let round = 0; round < rounds; round++) {
    const took = lines.filter((line) => line === `${round} took`).length;
    assert.is(took, 1, `round ${round}: ${took} processes took the folder`);
  }
  assert.equal(lines.filter((line) => !line.endsWith(" took") && !line.endsWith(" DataDirInUseError")), []);
});

test.run();

// `npm test`: runs every test/**/*.test.ts (or those whose path contains
// the one argument) and ends with the plain summary line CI reads,
// "N passed, N failed", on a line of its own and last, with exit code 1
// whenever anything failed.
//
// This process never runs a test. It runs the files in a worker process
// (test/runner/worker.ts, uvu's public runner) in a process group of its
// own, whose output it passes on and which tells it over fd 3 each file it
// loads and runs, each test's mark, each suite's counts and every failure
// uvu does not count (test/runner/channel.ts). So nothing a test does (a
// process.exit(), a loop that never yields, a child left running, a line
// that looks like a summary) can end the run without the line, or print
// after it. Counted as failures, each said on stderr:
// - a failed test, and each test a throwing before() or after.each() hook
//   kept from running (uvu swallows the hook's error: test/runner/uvu.ts
//   prints it), and an after() hook that throws (the run goes on);
// - test.only() and test.skip() (a test left out proves nothing), and a
//   file that runs no test (no run() call) unless it skips on purpose;
// - an error thrown outside a test's await (a timer, a callback), or a
//   rejection nobody handled, until a grace after the last test;
// - a worker that ends before it says it is done (process.exit() anywhere),
//   and what a test left running in its process group once it is done;
// - a worker that stops making progress, ended by SIGKILL of its group:
//   when no test finishes for TEST_RUN_STALL_AFTER_ERROR_SECONDS (180) after
//   such an error, or after its event loop ran dry with a test waiting (only
//   an unref()'d timer could still settle it); and the whole run past
//   TEST_RUN_TIMEOUT_MINUTES (25), a synchronous hang included.
// When a worker ends early the rest of its file is lost, and the files
// after it run in a new worker; past the whole-run limit nothing more runs.
//
// TEST_RUN_DIR, for the runner's own test, sets the folder searched.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { inspect } from "node:util";
import { parse, type Suite } from "uvu/parse";
import type { WorkerEvent } from "./runner/channel.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.env["TEST_RUN_DIR"] ?? here;
const workerScript = path.join(here, "runner", "worker.ts");

let passed = 0;
let failed = 0;

// The last character written to stdout, and to either stream: the summary
// line starts a line of its own after a run cut short mid-line.
const last = { stdout: "\n", any: "\n" };
let stdoutTail = "";
const toStdout = (chunk: Buffer | string) => {
  const text = chunk.toString();
  if (text === "") return;
  process.stdout.write(chunk);
  last.stdout = last.any = text.at(-1) ?? "\n";
  stdoutTail = (stdoutTail + text).slice(-2_000);
};
const toStderr = (chunk: Buffer | string) => {
  const text = chunk.toString();
  if (text === "") return;
  process.stderr.write(chunk);
  last.any = text.at(-1) ?? "\n";
};
/** A failure: said on stderr, counted. */
const fail = (message: string) => {
  failed++;
  toStderr(`\n  FAIL  ${message}\n`);
};
const say = (message: string) => toStderr(`\n  ...   ${message}\n`);

let ended = false;
/** Prints the summary line and exits: 1 when anything failed. */
const end = (code?: number): never => {
  ended = true;
  const line = `${passed} passed, ${failed} failed\n`;
  process.stdout.write(last.stdout !== "\n" || last.any !== "\n" ? `\n${line}` : line);
  process.exit(code ?? (failed > 0 ? 1 : 0));
};
// Should this process itself end another way, it still says so last.
process.on("exit", () => {
  if (ended) return;
  process.stdout.write(`\n${passed} passed, ${failed + 1} failed\n`);
  process.exitCode = 1;
});

// --- Settings and the files chosen.

const problems: string[] = [];
/** A positive number from the environment, at most `max` (a longer timer would overflow and fire at once). */
const setting = (name: string, fallback: number, max: number, unit: string) => {
  const raw = process.env[name];
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(value) || value <= 0 || value > max) {
    problems.push(`${name}=${JSON.stringify(raw)} is not a number of ${unit} above 0 and at most ${max}; unset it for ${fallback}`);
    return fallback;
  }
  return value;
};
const timeoutMinutes = setting("TEST_RUN_TIMEOUT_MINUTES", 25, 1_440, "minutes");
const stallSeconds = setting("TEST_RUN_STALL_AFTER_ERROR_SECONDS", 180, 86_400, "seconds");
const args = process.argv.slice(2);
if (args.length > 1) problems.push(`npm test takes one filter (a part of a test file's path), not ${args.length}: ${args.map((a) => JSON.stringify(a)).join(" ")}; run it once per filter`);
for (const problem of problems) fail(`${problem}; no test ran`);
if (problems.length > 0) end();

const filter = args[0];
const { suites } = await parse(root, /\.test\.ts$/);
const chosen = suites.filter((s) => filter === undefined || s.name.includes(filter));
if (chosen.length === 0) {
  fail(filter === undefined ? `no test file (*.test.ts) under ${root}` : `no test file under ${root} has "${filter}" in its path: no test ran`);
  end();
}

// --- Workers.

/** A worker process and what it said. */
interface Worker {
  readonly pid: number;
  readonly files: readonly Suite[];
  /** Where it is: started, loading files, running them, in the grace after the last test, done. */
  phase: "start" | "load" | "run" | "grace" | "done";
  /** The file loading or running (an index into files). */
  at: number;
  /** Marks of the suite running now, not yet counted. */
  readonly live: { passed: number; failed: number };
  /** It counted why it ends. */
  givingUp: boolean;
  /** Why this process ended it, once it did. */
  killedFor?: string;
  stall?: NodeJS.Timeout;
}

// eslint-disable-next-line no-control-regex
const withoutColours = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, "");

/** Where a worker is, for the one that hung or ended early. */
const position = (w: Worker) => {
  const file = w.files[w.at]?.name ?? "";
  const lastLine = withoutColours(stdoutTail).trimEnd().split("\n").at(-1)?.trim() ?? "";
  switch (w.phase) {
    case "start":
      return "before it loaded any test file";
    case "load":
      return `while ${file} was loading`;
    case "run":
      return `in ${file}, after "${lastLine}"`;
    default:
      return "after the last test";
  }
};

/** Ends a worker and everything in its process group. */
const kill = (w: Worker, why: string) => {
  w.killedFor ??= why;
  try {
    process.kill(-w.pid, "SIGKILL");
  } catch {
    // Already gone.
  }
};

/** The processes in process group `pgid` that are still running ("pid command"), or undefined where /proc cannot say. */
const groupMembers = (pgid: number): string[] | undefined => {
  let pids: string[];
  try {
    pids = fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return undefined;
  }
  return pids.flatMap((pid) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(pgrp) !== pgid || state === "Z") return [];
      const command = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
      return [`${pid} ${command.slice(0, 200)}`];
    } catch {
      return [];
    }
  });
};

let current: Worker | undefined;
let deadlinePassed = false;

/** Runs `files` in a new worker; resolves with those it did not reach. */
const runWorker = (files: readonly Suite[]) =>
  new Promise<Suite[]>((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, workerScript, JSON.stringify(files)], {
      detached: true,
      stdio: ["ignore", "pipe", "pipe", "pipe"],
      env: workerEnv,
    });
    if (child.pid === undefined) {
      child.once("error", (error) => {
        fail(`the test process could not start: ${inspect(error)}`);
        resolve([]);
      });
      return;
    }
    const w: Worker = { pid: child.pid, files, phase: "start", at: 0, live: { passed: 0, failed: 0 }, givingUp: false };
    current = w;
    // A test finishing (or a file starting) disarms the stall bound; another error does not put it off.
    const progress = () => {
      clearTimeout(w.stall);
      w.stall = undefined;
    };
    const armStall = (after: string) => {
      w.stall ??= setTimeout(() => kill(w, `no test finished in the ${stallSeconds} s (TEST_RUN_STALL_AFTER_ERROR_SECONDS) after ${after}: a hang ${position(w)}`), stallSeconds * 1_000);
    };
    const on = (event: WorkerEvent) => {
      switch (event.t) {
        case "loading":
          w.phase = "load";
          w.at = files.findIndex((s) => s.name === event.file);
          progress();
          break;
        case "file":
          w.phase = "run";
          w.at = files.findIndex((s) => s.name === event.file);
          progress();
          break;
        case "mark":
          if (event.ok) w.live.passed++;
          else w.live.failed++;
          progress();
          break;
        case "suite":
          passed += event.passed;
          failed += event.failed;
          w.live.passed = w.live.failed = 0;
          break;
        case "fail":
          failed++;
          break;
        case "error":
          failed++;
          armStall("an error outside a test (above)");
          break;
        case "dry":
          armStall("the event loop ran dry with a test waiting (only an unref()'d timer could still settle it)");
          break;
        case "givingUp":
          w.givingUp = true;
          break;
        case "ran":
          w.phase = "grace";
          break;
        case "allDone":
          w.phase = "done";
          break;
      }
    };
    const [, stdout, stderr, events] = child.stdio as unknown as [null, Readable, Readable, Readable];
    stdout.on("data", toStdout);
    stderr.on("data", toStderr);
    let said = "";
    events.setEncoding("utf8").on("data", (data: string) => {
      said += data;
      for (let nl = said.indexOf("\n"); nl >= 0; nl = said.indexOf("\n")) {
        on(JSON.parse(said.slice(0, nl)) as WorkerEvent);
        said = said.slice(nl + 1);
      }
    });

    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let heldOpen: NodeJS.Timeout | undefined;
    child.once("exit", (code, signal) => {
      exit = { code, signal };
      clearTimeout(w.stall);
      // What the tests started and left running: it would hold the output open, and outlive the run.
      const members = groupMembers(w.pid);
      let leftOver = members !== undefined && members.length > 0;
      if (members === undefined) {
        try {
          process.kill(-w.pid, 0);
          leftOver = true;
        } catch {
          // The group is empty.
        }
      }
      if (leftOver) {
        const which = members === undefined ? "" : `:\n        ${members.join("\n        ")}`;
        if (w.phase === "done" && w.killedFor === undefined) fail(`the tests left processes running once they were done (stopped now)${which}`);
        try {
          process.kill(-w.pid, "SIGKILL");
        } catch {
          // Gone since.
        }
      }
      // A process that left the group (detached) and holds the output open is not waited for.
      heldOpen = setTimeout(() => {
        fail("something the tests started (in a process group of its own) still holds their output open; no longer read");
        for (const stream of [stdout, stderr, events]) stream.destroy();
        settle();
      }, 2_000);
    });
    child.once("close", () => settle());

    let settled = false;
    const settle = () => {
      if (settled || exit === undefined) return;
      settled = true;
      clearTimeout(heldOpen);
      current = undefined;
      // The suite it was in, as far as it got.
      passed += w.live.passed;
      failed += w.live.failed;
      if (w.phase !== "done") {
        const how = exit.signal !== null ? `was killed (${exit.signal})` : `exited with code ${String(exit.code)}`;
        if (w.killedFor !== undefined) fail(w.killedFor);
        else if (!w.givingUp) fail(`the test process ${how} ${position(w)}, before the run's end: process.exit() (in a test, a hook or a timer) or a crash ends it so`);
      }
      const file = w.files[w.at];
      let rest: Suite[] = [];
      if (w.phase === "load" && file !== undefined) {
        rest = files.filter((s) => s !== file);
        say(`${file.name} did not run`);
      } else if (w.phase === "run" && file !== undefined) {
        rest = files.slice(w.at + 1);
        say(`the rest of ${file.name} did not run`);
      }
      resolve(rest);
    };
  });

const colour = process.stdout.isTTY && process.env["FORCE_COLOR"] === undefined && process.env["NO_COLOR"] === undefined;
// Its stdout is a pipe to this process: uvu's colours are asked for when this one writes to a terminal.
const workerEnv = colour ? { ...process.env, FORCE_COLOR: "1" } : process.env;

// Whatever a test does, this process ends with the summary line.
/** Ends the run now, the worker's group with it, counting the suite it was in as far as it got. */
const abandon = (why: string) => {
  if (current !== undefined) {
    kill(current, why);
    passed += current.live.passed;
    failed += current.live.failed;
  }
  fail(`${why}${current === undefined ? "" : ` ${position(current)}`}`);
  end(1);
};
process.on("uncaughtException", (error) => abandon(`test/run.ts itself failed: ${inspect(error)}`));
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.once(signal, () => abandon(`interrupted (${signal})`));

// uvu has no per-test timeout: a test that hangs would hold CI until its
// own limit. Past TEST_RUN_TIMEOUT_MINUTES (a whole run takes a few) the
// run ends as a failure, the hung test named by its file and the last line
// of its suite, the tests that had finished counted.
const deadline = setTimeout(() => {
  deadlinePassed = true;
  if (current !== undefined) kill(current, `the run passed ${timeoutMinutes} minutes (TEST_RUN_TIMEOUT_MINUTES): a hang ${position(current)}`);
}, timeoutMinutes * 60_000);

let queue: Suite[] = chosen;
while (queue.length > 0) {
  queue = await runWorker(queue);
  if (queue.length === 0) break;
  if (deadlinePassed) {
    say(`not run, past the run's time: ${queue.map((s) => s.name).join(", ")}`);
    break;
  }
  say(`the ${queue.length} test file(s) after it run in a new process`);
}
clearTimeout(deadline);
end();

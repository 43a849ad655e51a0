// Runs every test/**/*.test.ts (or those whose path contains the first
// argument) through uvu's public runner (uvu/parse, uvu/run) in one
// process, and ends with the plain summary line CI reads:
// "N passed, N failed". Every way a run can end prints that line.
//
// The counts are read from uvu's own report: its summary ("Total:",
// "Passed:"), which is the last thing it writes, so only the block at the
// very end counts (a test can print lines that look like one). A suite
// whose before() hook throws runs none of its tests, which uvu reports as
// fewer passed than total but not as a failure; here every test that did
// not pass is a failure. uvu's exit code is checked against its summary:
// a run it calls failed is never reported as passed.
//
// Failures uvu does not see are counted too, one each, naming the file:
// - an error thrown outside a test's await (in a timer, a callback) or a
//   promise rejection nobody handled, which would crash the process; the
//   run goes on;
// - an after() hook that throws, which makes uvu give up its run;
// - a test waiting on what nothing can settle: the event loop runs dry.
// The last two stop uvu in this process, so the files it had not reached
// are run by this runner in a new process (a continuation, which hands its
// counts back on fd 3) and its counts added. A file that fails to load
// stops the run before any test, which is a failure too.
//
// TEST_RUN_DIR, for the runner's own test, sets the folder searched.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { parse } from "uvu/parse";
import { run } from "uvu/run";

const script = fileURLToPath(import.meta.url);
const root = process.env["TEST_RUN_DIR"] ?? path.dirname(script);
const startedAt = Date.now();

/** Set in a continuation: the files to run, exactly. */
const continuation = process.argv[2] === "--continuation" ? (JSON.parse(process.argv[3] ?? "[]") as string[]) : undefined;
const filter = continuation === undefined ? process.argv[2] : undefined;

const { suites } = await parse(root, /\.test\.ts$/);
const chosen = suites.filter((s) => (continuation === undefined ? filter === undefined || s.name.includes(filter) : continuation.includes(s.name)));
const names = chosen.map((s) => s.name);

/** uvu's report without its terminal colours, to be read. */
// eslint-disable-next-line no-control-regex
const withoutColours = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, "");

// What uvu has written so far, read one write at a time (it writes each mark
// and each line whole), for when the run ends without its summary.
let currentFile: string | undefined;
const marks = { passed: 0, failed: 0, notRun: 0 };
let failedBeforeSuite = 0;
const tally = (chunk: string) => {
  if (chunk === "• ") marks.passed++;
  else if (chunk === "✘ ") marks.failed++;
  else if (chunk.endsWith("\n") && names.includes(chunk.slice(0, -1))) currentFile = chunk.slice(0, -1);
  else {
    const suiteEnd = /^ {2}\((\d+) \/ (\d+)\)\n$/.exec(chunk);
    if (suiteEnd !== null) {
      // Tests a throwing before() hook kept from running.
      marks.notRun += Number(suiteEnd[2]) - Number(suiteEnd[1]) - (marks.failed - failedBeforeSuite);
      failedBeforeSuite = marks.failed;
    }
  }
};
const markedFailures = () => marks.failed + marks.notRun;

// An error outside any test's await can strand the test that was waiting
// for what threw, while a listener (the service under test) keeps the loop
// from running dry: once one is seen, a run in which no test finishes for
// this long ends as the watchdog ends it, rather than at its bound
// (TEST_RUN_STALL_AFTER_ERROR_SECONDS, for the runner's own test).
const stalledAfterErrorMs = Number(process.env["TEST_RUN_STALL_AFTER_ERROR_SECONDS"] ?? 180) * 1000;
let stalled: NodeJS.Timeout | undefined;

// uvu writes its report to stdout: copied on, and kept to read the counts.
let report = "";
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
  const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
  report += text;
  const plain = withoutColours(text);
  tally(plain);
  if (plain === "• " || plain === "✘ ") stalled?.refresh();
  return (write as (...args: unknown[]) => boolean)(chunk, ...rest);
}) as typeof process.stdout.write;

let extraFailures = 0;
/** A failure uvu did not count: said on stderr and counted here. */
const fail = (message: string, ...error: unknown[]) => {
  extraFailures++;
  console.error(`\n  FAIL  ${message}`, ...error);
};

/** The summary line, or in a continuation the counts for the runner that started it. */
const summarise = (passed: number, failed: number) => {
  if (continuation === undefined) console.log(`${passed} passed, ${failed} failed`);
  else fs.writeSync(3, `${passed} ${failed}\n`);
};

// uvu has no per-test timeout: a test that hangs would hold CI until its
// own limit. Past TEST_RUN_TIMEOUT_MINUTES (25; a whole run takes a few)
// the run ends as a failure, with the tests that had finished counted and
// the one that hung named by its file and its suite's line.
const timeoutMinutes = Number(process.env["TEST_RUN_TIMEOUT_MINUTES"] ?? 25);
/** Ends a run that cannot go on: the hung test named, what had finished counted. */
const endHung = (why: string) => {
  process.stdout.write = write;
  const lastLine = withoutColours(report).trimEnd().split("\n").at(-1) ?? "";
  fail(`${why}: a test hung in ${currentFile ?? "loading"}, "${lastLine.trim()}"`);
  const [passed, failed] = [marks.passed, markedFailures() + extraFailures];
  process.once("exit", () => summarise(passed, failed));
  process.exit(1);
};
const watchdog = setTimeout(() => endHung(`the run passed ${timeoutMinutes} minutes (TEST_RUN_TIMEOUT_MINUTES)`), timeoutMinutes * 60_000);
watchdog.unref();

/** Runs `files` in a new process, for when uvu cannot go on in this one. */
const runElsewhere = (files: readonly string[]) =>
  new Promise<{ passed: number; failed: number }>((resolve) => {
    console.error(`\n  ...   the ${files.length} test file(s) after it run in a new process`);
    const minutesLeft = timeoutMinutes - (Date.now() - startedAt) / 60_000;
    const child = spawn(process.execPath, [...process.execArgv, script, "--continuation", JSON.stringify(files)], {
      stdio: ["inherit", "inherit", "inherit", "pipe"],
      env: { ...process.env, TEST_RUN_DIR: root, TEST_RUN_TIMEOUT_MINUTES: String(Math.max(minutesLeft, 0.1)) },
    });
    let counts = "";
    (child.stdio[3] as Readable).setEncoding("utf8").on("data", (data: string) => (counts += data));
    let ended = false;
    const end = (problem?: unknown) => {
      if (ended) return;
      ended = true;
      const read = /^(\d+) (\d+)\n$/.exec(counts);
      if (read !== null) return resolve({ passed: Number(read[1]), failed: Number(read[2]) });
      console.error(`\n  FAIL  the process running ${files.join(", ")} ended without counting them:`, problem ?? "no counts");
      resolve({ passed: 0, failed: 1 });
    };
    child.on("error", end);
    child.on("close", () => end());
  });

let finishing = false;
/** Stops what the tests shared, runs the files uvu did not reach, and ends the run. */
const finish = async (passed: number, failed: number, notReached: readonly string[] = []) => {
  finishing = true;
  process.stdout.write = write;
  clearTimeout(watchdog);
  const { stopSharedAzurite } = await import("./support/env.js");
  await stopSharedAzurite();
  let elsewhere = { passed: 0, failed: 0 };
  if (notReached.length > 0) elsewhere = await runElsewhere(notReached);
  const allFailed = failed + extraFailures + elsewhere.failed;
  // On exit, so that the line comes after what uvu says when its run is cut short.
  process.once("exit", () => summarise(passed + elsewhere.passed, allFailed));
  // Exit even if a leaked handle (a client, a timer) would keep the process up.
  process.exit(allFailed > 0 || chosen.length === 0 ? 1 : 0);
};

const after = (file: string) => names.slice(names.indexOf(file) + 1);

// Without this the first such error would end the process with no summary
// and the files after it unrun. The file it came from is named when its
// stack says so: a timer's error can fire while a later file runs.
process.on("uncaughtException", (error, origin) => {
  const stack = error instanceof Error ? (error.stack ?? "") : "";
  const from = chosen.filter((s) => stack.includes(s.file)).map((s) => s.name);
  const what = origin === "unhandledRejection" ? "a promise rejection nobody handled" : "an error thrown outside any test's await (in a timer or a callback)";
  const where = currentFile === undefined ? "while the test files were loading" : `while ${currentFile} was running`;
  fail(`${what}${from.length > 0 ? `, from ${from.join(", ")}` : ""}, ${where}:`, error);
  if (stalled === undefined) stalled = setTimeout(() => endHung(`no test finished in the ${stalledAfterErrorMs / 1000} s after that error`), stalledAfterErrorMs).unref();
  else stalled.refresh();
});

// The loop runs dry with uvu's run unsettled only when a test (or a file
// being loaded) waits on a promise nothing left can settle; Node would exit
// with code 13 and no summary.
process.on("beforeExit", () => {
  if (finishing) return;
  if (currentFile === undefined) {
    fail("loading the test files waits on something nothing can settle (the event loop ran dry); no test ran");
    void finish(0, 0);
    return;
  }
  fail(`a test in ${currentFile} waits on something nothing can settle (the event loop ran dry); the rest of that file did not run`);
  void finish(marks.passed, markedFailures(), after(currentFile));
});

try {
  await run(chosen, { bail: false });
} catch (error) {
  if (currentFile === undefined) {
    fail("a test file could not be loaded; no test ran:", error);
    await finish(0, 0);
  } else {
    // Once uvu runs tests, its run fails only when an after() hook throws
    // (uvu 0.5: a suite's runner returns from its finally block, which
    // swallows any other error, after running the after() hooks).
    fail(`an after() hook in ${currentFile} threw, which ends uvu's run; the rest of that file did not run:`, error);
    await finish(marks.passed, markedFailures(), after(currentFile));
  }
}
process.stdout.write = write;
const uvuExitCode = process.exitCode;

const summary = /\n {2}Total: {5}(\d+)\n {2}Passed: {4}(\d+)\n {2}Skipped: {3}\d+\n {2}Duration: {2}[^\n]*\n\n$/.exec(withoutColours(report));
let passed = marks.passed;
let failed = markedFailures();
if (summary === null) {
  fail("uvu's summary is not the last thing it wrote; counted from its marks per test");
} else {
  passed = Number(summary[2]);
  failed = Number(summary[1]) - passed;
}
if (uvuExitCode !== undefined && uvuExitCode !== 0 && failed === 0) {
  fail(`uvu ended with exit code ${uvuExitCode}, which says a test failed, but its summary counts no failure`);
}
await finish(passed, failed);

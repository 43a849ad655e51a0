// Runs the test files it is given (argv[2], uvu/parse's suites as JSON)
// through uvu's public runner (uvu/run), for test/run.ts, which started it
// in a process group of its own and may kill that group at any time. It
// prints nothing of its own but failures; it tells test/run.ts what
// happens over fd 3 (test/runner/channel.ts), and it is test/run.ts that
// counts and prints the summary line.
//
// What uvu writes is copied to stdout as it is and read here one write at
// a time (uvu writes each mark and each line whole): a file starting, each
// test's mark, each suite's "(passed / total)" line, its summary.
import { register } from "node:module";
import type { Suite } from "uvu/parse";
import { currentFile, failure, hookFailures, openChannel, place, send, skipReason, takeNotices } from "./channel.js";

const files = JSON.parse(process.argv[2] ?? "[]") as Suite[];
const names = files.map((s) => s.name);
openChannel(3);

// Test files import "uvu"; they get test/runner/uvu.ts, which is uvu with
// its hooks' failures, .only and .skip said. That module itself imports
// the real one. Only what is imported after this line is redirected, and
// only ES modules (this repository's files are): a CommonJS test file
// would get uvu itself.
const wrapper = new URL("./uvu.ts", import.meta.url).href;
const hooks = `export async function resolve(specifier, context, next) {
  if (specifier === "uvu" && context.parentURL !== ${JSON.stringify(wrapper)}) return next(${JSON.stringify(wrapper)}, context);
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);

type Phase = "load" | "run" | "grace";
let phase: Phase = "load";

/** uvu's report without its terminal colours, to be read. */
// eslint-disable-next-line no-control-regex
const withoutColours = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, "");

// The suite running now and the file running now, until their ends count them.
const suiteMarks = { passed: 0, failed: 0 };
const counted = { passed: 0, failed: 0, total: 0 };
let file = { tests: 0, failed: 0 };

// The event loop ran dry while a test waited: something the loop does not
// see (an unref()'d timer) may still settle it, so the loop is kept up
// until a test finishes; test/run.ts ends a wait that finishes nothing.
let keptUp: NodeJS.Timeout | undefined;

const fileEnds = () => {
  const name = place.running;
  if (name === undefined) return;
  if (file.tests === 0 && file.failed === 0 && skipReason(name) === undefined) {
    failure(`${name} ran no test: it defines none, or never calls its suite's run() (a deliberate skip says so: skippingOnPurpose() in test/runner/channel.ts)`);
  }
};

const fileStarts = (name: string) => {
  fileEnds();
  place.running = name;
  file = { tests: 0, failed: 0 };
  progress();
  send({ t: "file", file: name });
  for (const notice of takeNotices(name)) {
    file.failed++;
    failure(notice);
  }
};

const suiteEnds = (passed: number, total: number) => {
  const notRun = total - passed - suiteMarks.failed;
  // A hook that stopped the suite (before(), after.each()) fails it even when it had no test to keep from running.
  const failed = suiteMarks.failed + Math.max(notRun, hookFailures.stopping > 0 ? 1 : 0) + hookFailures.after;
  hookFailures.stopping = 0;
  hookFailures.after = 0;
  suiteMarks.passed = 0;
  suiteMarks.failed = 0;
  counted.passed += passed;
  counted.failed += failed;
  counted.total += total;
  file.tests += total;
  file.failed += failed;
  send({ t: "suite", passed, failed });
};

/** Something moved on: a loop that runs dry again is a new wait. */
const progress = () => {
  if (keptUp !== undefined) clearInterval(keptUp);
  keptUp = undefined;
};

const read = (plain: string) => {
  if (plain === "• " || plain === "✘ ") {
    const ok = plain === "• ";
    if (ok) suiteMarks.passed++;
    else suiteMarks.failed++;
    progress();
    send({ t: "mark", ok });
    return;
  }
  if (plain.endsWith("\n") && names.includes(plain.slice(0, -1))) {
    phase = "run";
    fileStarts(plain.slice(0, -1));
    return;
  }
  const suiteEnd = /^ {2}\((\d+) \/ (\d+)\)\n$/.exec(plain);
  if (suiteEnd !== null) suiteEnds(Number(suiteEnd[1]), Number(suiteEnd[2]));
};

let tail = "";
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
  const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
  tail = (tail + text).slice(-4_000);
  read(withoutColours(text));
  return (write as (...args: unknown[]) => boolean)(chunk, ...rest);
}) as typeof process.stdout.write;

const where = () => {
  if (phase === "grace") return "after the last test (in the grace before the run ends)";
  const name = currentFile();
  if (name === undefined) return "before any test file loaded";
  return phase === "load" ? `while ${name} was loading` : `while ${name} was running`;
};

// Such an error would end the process; it is counted, and the run goes on.
// The file it came from is named when its stack says so: a timer's error
// can fire while a later file runs.
process.on("uncaughtException", (error, origin) => {
  const stack = error instanceof Error ? (error.stack ?? "") : "";
  const from = files.filter((s) => stack.includes(s.file)).map((s) => s.name);
  const what = origin === "unhandledRejection" ? "a promise rejection nobody handled" : "an error thrown outside any test's await (in a timer or a callback)";
  console.error(`\n  FAIL  ${what}${from.length > 0 ? `, from ${from.join(", ")}` : ""}, ${where()}:`, error);
  send({ t: "error" });
});

let endGrace: (() => void) | undefined;
process.on("beforeExit", () => {
  if (phase === "grace") {
    endGrace?.();
    return;
  }
  if (keptUp !== undefined) return;
  send({ t: "dry" });
  keptUp = setInterval(() => undefined, 60_000);
});

const { run } = await import("uvu/run");
// uvu/run reads each suite's `file` just before it imports it: that is
// when this file is known to be loading (and the one before it, loaded).
const watched = files.map((s) => ({
  name: s.name,
  get file() {
    place.loading = s.name;
    progress();
    send({ t: "loading", file: s.name });
    return s.file;
  },
}));
try {
  await run(watched, { bail: false });
} catch (error) {
  // Once tests run, uvu's run fails only when an after() hook throws, which
  // test/runner/uvu.ts does not let happen.
  failure(phase === "load" ? `${place.loading ?? "a test file"} could not be loaded; the other files run in a new process:` : `uvu's run failed ${where()}:`, error);
  send({ t: "givingUp" });
  process.exit(1);
}
fileEnds();
process.stdout.write = write;
const uvuExitCode = process.exitCode;
process.exitCode = undefined;

// uvu's own summary, the last thing it wrote, against what was counted here.
const summary = /\n {2}Total: {5}(\d+)\n {2}Passed: {4}(\d+)\n {2}Skipped: {3}\d+\n {2}Duration: {2}[^\n]*\n\n$/.exec(withoutColours(tail));
if (summary === null) failure("uvu's summary is not the last thing it wrote; counted from its marks per test");
else if (Number(summary[1]) !== counted.total || Number(summary[2]) !== counted.passed) {
  failure(`uvu's summary (${summary[2]} of ${summary[1]} passed) is not what its suites said (${counted.passed} of ${counted.total}); counted from its suites`);
}
if (uvuExitCode !== undefined && uvuExitCode !== 0 && counted.failed === 0) {
  failure(`uvu ended with exit code ${String(uvuExitCode)}, which says a test failed, but no failure was counted`);
}

// Errors from a timer or a rejection a test left behind can come a moment
// after the last test: they count until the loop has nothing left to run
// (beforeExit), or for a second when something (a server) keeps it up.
phase = "grace";
send({ t: "ran" });
await new Promise<void>((resolve) => {
  const timer = setTimeout(resolve, 1_000).unref();
  endGrace = () => {
    clearTimeout(timer);
    resolve();
  };
});

try {
  const { stopSharedAzurite } = await import("../support/env.js");
  await stopSharedAzurite();
} catch (error) {
  failure("stopping the shared Azurite failed:", error);
}
send({ t: "allDone" });
// Even if a leaked handle (a client, a timer) would keep the process up: test/run.ts reports what it left running.
process.exit(0);

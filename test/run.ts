// Runs every test/**/*.test.ts (or those whose path contains the first
// argument) through uvu's public runner (uvu/parse, uvu/run) in one
// process, and ends with the plain summary line CI reads:
// "N passed, N failed".
//
// The counts are read from uvu's own report ("Total:", "Passed:"): a suite
// whose before() hook throws runs none of its tests, which uvu reports as
// fewer passed than total but not as a failure; here every test that did
// not pass is a failure. A file that fails to load stops the run, which is
// a failure too.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "uvu/parse";
import { run } from "uvu/run";

const root = path.dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2];

const { suites } = await parse(root, /\.test\.ts$/);
const chosen = suites.filter((s) => filter === undefined || s.name.includes(filter));

// uvu writes its report to stdout: copied on, and kept to read the counts.
let report = "";
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
  report += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
  return (write as (...args: unknown[]) => boolean)(chunk, ...rest);
}) as typeof process.stdout.write;

/** uvu's report without its terminal colours, to be read. */
// eslint-disable-next-line no-control-regex
const withoutColours = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, "");

// uvu has no per-test timeout: a test that hangs would hold CI until its
// own limit. Past TEST_RUN_TIMEOUT_MINUTES (25; a whole run takes a few)
// the run ends as a failure, with the tests that had finished counted and
// the one that hung named by its suite's line.
const timeoutMinutes = Number(process.env["TEST_RUN_TIMEOUT_MINUTES"] ?? 25);
const watchdog = setTimeout(() => {
  process.stdout.write = write;
  const sofar = withoutColours(report);
  const lastLine = sofar.trimEnd().split("\n").at(-1) ?? "";
  console.error(`\n  FAIL  the run passed ${timeoutMinutes} minutes (TEST_RUN_TIMEOUT_MINUTES): a test hung in "${lastLine.trim()}"`);
  console.log(`${(sofar.match(/•/g) ?? []).length} passed, ${(sofar.match(/✘/g) ?? []).length + 1} failed`);
  process.exit(1);
}, timeoutMinutes * 60_000);
watchdog.unref();

let loadFailed = false;
try {
  await run(chosen, { bail: false });
} catch (error) {
  loadFailed = true;
  console.error("\n  FAIL  a test file could not be loaded; no test ran:", error);
}
process.stdout.write = write;
clearTimeout(watchdog);

const plain = withoutColours(report);
const count = (label: string) => Number(new RegExp(`${label}:\\s+(\\d+)`).exec(plain)?.[1] ?? 0);
const passed = count("Passed");
const failed = count("Total") - passed + (loadFailed ? 1 : 0);

const { stopSharedAzurite } = await import("./support/env.js");
await stopSharedAzurite();
console.log(`${passed} passed, ${failed} failed`);
// Exit even if a leaked handle (a client, a timer) would keep the process up.
process.exit(failed > 0 || chosen.length === 0 ? 1 : 0);

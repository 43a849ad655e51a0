// What a test worker (test/runner/worker.ts) tells the runner that started
// it (test/run.ts): one JSON line per event on fd 3, written synchronously,
// so that what a worker said before a process.exit() or a crash is never
// lost. Also the little the worker, its uvu wrapper (test/runner/uvu.ts)
// and the test helpers share: which file is loading or running, and what
// it should report when it runs. Outside a worker (a test file run on its
// own) nothing is sent and nothing is counted.
import fs from "node:fs";

/** One thing a worker tells the runner. */
export type WorkerEvent =
  /** uvu imports this file (its tests are queued, not yet run). */
  | { t: "loading"; file: string }
  /** uvu runs this file's tests; the files before it are done. */
  | { t: "file"; file: string }
  /** A test finished: passed or failed. */
  | { t: "mark"; ok: boolean }
  /** A suite finished, counted whole: its passed tests, and as failed those that failed or did not run, and its hooks that threw. */
  | { t: "suite"; passed: number; failed: number }
  /** A failure the worker has printed, counted once. */
  | { t: "fail" }
  /** An error thrown outside any test's await, or a rejection nobody handled, printed and counted. */
  | { t: "error" }
  /** The event loop ran dry while a test (or a file being loaded) waited: only an unref()'d timer can still settle it. */
  | { t: "dry" }
  /** The worker cannot go on and has counted why; the runner goes on with the files it did not reach. */
  | { t: "givingUp" }
  /** uvu's run is over; the worker waits out the grace for late errors. */
  | { t: "ran" }
  /** Everything is counted and the shared Azurite stopped: the worker exits. */
  | { t: "allDone" };

let channel: number | undefined;

/** Makes this process a worker that reports on `fd`. */
export function openChannel(fd: number): void {
  channel = fd;
}

/** Tells the runner; a runner that is gone takes this worker and its process group with it. */
export function send(event: WorkerEvent): void {
  if (channel === undefined) return;
  try {
    fs.writeSync(channel, `${JSON.stringify(event)}\n`);
  } catch {
    process.kill(-process.pid, "SIGKILL");
  }
}

/** Says a failure uvu does not count, on stderr, and counts it. */
export function failure(message: string, ...details: unknown[]): void {
  console.error(`\n  FAIL  ${message}`, ...details);
  send({ t: "fail" });
}

/** The test file uvu is importing, then the one whose tests it runs. */
export const place: { loading?: string; running?: string } = {};

/** The file being run, or else loaded. */
export function currentFile(): string | undefined {
  return place.running ?? place.loading;
}

/** Hooks that threw in the suite running now, until its end counts them. */
export const hookFailures = { stopping: 0, after: 0 };

const notices = new Map<string, string[]>();

/** A failure found while `file` loaded, said and counted when it runs (so a file a later worker loads again is not counted twice). */
export function noticeFor(file: string, message: string): void {
  notices.set(file, [...(notices.get(file) ?? []), message]);
}

/** The failures `file` left for its run, once. */
export function takeNotices(file: string): string[] {
  const found = notices.get(file) ?? [];
  notices.delete(file);
  return found;
}

const skippedOnPurpose = new Map<string, string>();

/**
 * Marks the current test file as leaving its tests out on purpose (a
 * loud skip outside CI, such as the MySQL suites without a MySQL): a file
 * that runs no test is otherwise a failure.
 */
export function skippingOnPurpose(reason: string): void {
  const file = currentFile();
  if (file !== undefined) skippedOnPurpose.set(file, reason);
}

/** Why `file` left its tests out on purpose, if it said so. */
export function skipReason(file: string): string | undefined {
  return skippedOnPurpose.get(file);
}

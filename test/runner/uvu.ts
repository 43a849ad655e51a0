// What a test file gets for `import { suite, test } from "uvu"` when
// test/run.ts runs it (its worker's resolve hook hands it this module):
// uvu's own suites, with what uvu would leave unsaid said.
//
// - A before() hook that throws: uvu runs none of its suite's tests and
//   swallows the error (uvu 0.5 returns from the finally block that runs the
//   after() hooks). Its reason is printed here, then thrown on to uvu, which
//   still skips the tests; the runner counts them as failed.
// - An after.each() hook that throws: the same (uvu calls it again from its
//   catch block, and that second error is swallowed too).
// - An after() hook that throws: uvu throws it out of its whole run, so no
//   later file would run. Its reason is printed and counted here, and it
//   is not thrown on: the rest of the run goes on.
// - test.only() and test.skip(): a test left out proves nothing, and uvu
//   only counts it as "Skipped". Each is a failure, named, once its file runs.
import * as uvu from "uvu";
import { currentFile, hookFailures, noticeFor } from "./channel.js";

type Kind = "before()" | "after()" | "after.each()";

function watched<T>(t: uvu.Test<T>, suiteName: string): uvu.Test<T> {
  const { before, after, only, skip } = t;
  const [beforeEach, afterEach] = [before.each, after.each];
  // The shared `test` suite is used by every file that imports it: the file is the one loading when a hook is added.
  const where = () => {
    const file = currentFile() ?? "a test file";
    return suiteName === "" ? file : `suite "${suiteName}" in ${file}`;
  };
  const guard = (kind: Kind, hook: uvu.Callback<T>): uvu.Callback<T> => {
    const label = where();
    return async (context) => {
      try {
        await hook(context);
      } catch (error) {
        const after = kind === "after.each()" && context.__test__ !== "" ? ` (after test "${context.__test__}")` : "";
        const outcome = {
          "before()": "so none of its suite's tests ran (each counted as failed)",
          "after.each()": "so its suite's tests from that one on did not run (each counted as failed)",
          "after()": "counted as a failure; the run goes on",
        }[kind];
        console.error(`\n  FAIL  the ${kind} hook of ${label} threw${after}, ${outcome}:`, error);
        if (kind === "after()") {
          hookFailures.after++;
          return;
        }
        hookFailures.stopping++;
        throw error;
      }
    };
  };
  t.before = Object.assign((hook: uvu.Callback<T>) => before(guard("before()", hook)), { each: beforeEach });
  t.after = Object.assign((hook: uvu.Callback<T>) => after(guard("after()", hook)), { each: (hook: uvu.Callback<T>) => afterEach(guard("after.each()", hook)) });
  t.only = (name: string, test: uvu.Callback<T>) => {
    const file = currentFile();
    if (file !== undefined) noticeFor(file, `test.only("${name}") in ${where()}: the suite's other tests do not run; remove .only`);
    only(name, test);
  };
  t.skip = (name?: string, test?: uvu.Callback<T>) => {
    const file = currentFile();
    if (file !== undefined) noticeFor(file, `test.skip(${name === undefined ? "" : `"${name}"`}) in ${where()}: a skipped test proves nothing; remove .skip (or the test)`);
    skip(name, test);
  };
  return t;
}

export const test = watched(uvu.test, "");

export function suite<T = Record<string, unknown>>(title?: string, context?: T): uvu.Test<T> {
  return watched(uvu.suite<T>(title, context), title ?? "");
}

export const exec = uvu.exec;

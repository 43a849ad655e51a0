import { test } from "uvu";
import * as assert from "uvu/assert";
import { openFileLimit, openFileLimitProblem } from "../../src/ops/open-file-limit.js";

const limits = (soft: string) => `Limit                     Soft Limit           Hard Limit           Units\nMax open files            ${soft}                 1048576              files\n`;

test("the soft open-file limit is read from /proc/self/limits: a number, unlimited, or unknown", () => {
  assert.is(openFileLimit(() => limits("4096")), 4096);
  assert.is(openFileLimit(() => limits("unlimited")), Number.POSITIVE_INFINITY);
  assert.is(openFileLimit(() => "nothing here"), undefined);
  assert.is(openFileLimit(() => { throw new Error("ENOENT"); }), undefined);
  assert.type(openFileLimit(), "number", "this machine's own");
});

test("a limit below the connections, the pool and the service's own files is a problem that says what to set", () => {
  assert.is(openFileLimitProblem(undefined, 10_000, 10), undefined);
  assert.is(openFileLimitProblem(Number.POSITIVE_INFINITY, 10_000, 10), undefined);
  assert.is(openFileLimitProblem(10_266, 10_000, 10), undefined);
  assert.match(openFileLimitProblem(10_265, 10_000, 10) ?? "", "need 10266: raise the limit");
});

test.run();

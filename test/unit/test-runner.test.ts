// test/run.ts on test files written for it into a folder of their own
// (TEST_RUN_DIR): its summary line is what CI trusts, so a run that failed
// must never end in "N passed, 0 failed" or exit 0, and must always end in
// the line, on a line of its own, in bounded time.
import { spawn } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "uvu";
import * as assert from "uvu/assert";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

const passingLater = `import { test } from "uvu";
test("a later file runs", async () => { await new Promise((resolve) => setTimeout(resolve, 50)); });
test.run();
`;

/** How long a run of the runner may take here before it counts as hung (and is ended). */
const runnerLimitMs = 40_000;

/**
 * Runs test/run.ts on `files` (name → source, ES modules as in this
 * repository); resolves with its exit code, stdout, stderr and how long it
 * took. A runner still going after runnerLimitMs is ended (code null).
 */
async function runner(files: Record<string, string>, env: Record<string, string> = {}, args: string[] = []): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "run-ts-"));
  try {
    await fs.symlink(path.join(repo, "node_modules"), path.join(dir, "node_modules"));
    await fs.writeFile(path.join(dir, "package.json"), '{ "type": "module" }\n');
    for (const [name, source] of Object.entries(files)) await fs.writeFile(path.join(dir, name), source);
    const started = Date.now();
    return await new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ["--import", "tsx", path.join(repo, "test/run.ts"), ...args], {
        cwd: repo,
        env: { ...process.env, TEST_RUN_DIR: dir, FORCE_COLOR: "0", ...env },
        stdio: ["ignore", "pipe", "pipe"],
        // Its own group, so that ending it ends what it started in its group too.
        detached: true,
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      const limit = setTimeout(() => {
        stderr += `\n[the runner was still going after ${runnerLimitMs} ms: ended]`;
        process.kill(-child.pid!, "SIGTERM");
        setTimeout(() => process.kill(-child.pid!, "SIGKILL"), 3_000).unref();
      }, runnerLimitMs);
      child.once("error", reject);
      child.once("close", (code) => {
        clearTimeout(limit);
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      });
    });
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

const lastLine = (text: string) => text.trimEnd().split("\n").at(-1);

test("a passing run ends in its counts and exit code 0", async () => {
  const { code, stdout } = await runner({ "a.test.ts": passingLater });
  assert.is(lastLine(stdout), "1 passed, 0 failed");
  assert.is(code, 0);
});

test("only uvu's own summary counts, not a test's output that looks like one", async () => {
  const { code, stdout } = await runner({
    "a.test.ts": `import { test } from "uvu";
import * as assert from "uvu/assert";
test("logs a summary", () => console.log("  Total:     99\\n  Passed:    99"));
test("fails", () => assert.is(1, 2));
test.run();
`,
  });
  assert.is(lastLine(stdout), "1 passed, 1 failed");
  assert.is(code, 1);
});

test("an error from a timer and a rejection nobody handled fail the run, which goes on", async () => {
  const { code, stdout, stderr } = await runner({
    "a-rejection.test.ts": `import { test } from "uvu";
test("rejects unawaited", () => { void Promise.reject(new Error("nobody awaited this")); });
test.run();
`,
    "b-timer.test.ts": `import { test } from "uvu";
import * as assert from "uvu/assert";
test("asserts in a timer", () => { setTimeout(() => assert.is(1, 2, "asserted in a timer"), 10); });
test.run();
`,
    "c-later.test.ts": passingLater,
  });
  assert.is(lastLine(stdout), "3 passed, 2 failed");
  assert.is(code, 1);
  assert.match(stderr, /a promise rejection nobody handled, from a-rejection\.test\.ts/);
  assert.match(stderr, /an error thrown outside any test's await \(in a timer or a callback\), from b-timer\.test\.ts/);
});

test("an error from a timer or a rejection after the last test still counts", async () => {
  const { code, stdout, stderr } = await runner({
    "a.test.ts": `import { test } from "uvu";
test("passes, and leaves a timer and a rejection behind", () => {
  setTimeout(() => { throw new Error("a late timer error"); }, 500);
  setTimeout(() => { void Promise.reject(new Error("a late rejection")); }, 600);
});
test.run();
`,
  });
  assert.is(lastLine(stdout), "1 passed, 2 failed");
  assert.is(code, 1);
  assert.match(stderr, /after the last test.*: Error: a late timer error/);
  assert.match(stderr, /after the last test.*: Error: a late rejection/);
});

test("a throwing after() hook fails the run, which goes on; a test that waits forever fails it, and the files after it run", async () => {
  const { code, stdout, stderr } = await runner(
    {
      "a-after.test.ts": `import { suite, test } from "uvu";
test.after(() => { throw new Error("the after hook failed"); });
test("one", () => {});
test("two", () => {});
test("three", () => {});
test.run();
const later = suite("later in the same file");
later("runs too", () => {});
later.run();
`,
      "b-hang.test.ts": `import { test } from "uvu";
test("waits forever", async () => { await new Promise(() => {}); });
test.run();
`,
      "c-later.test.ts": passingLater,
    },
    { TEST_RUN_STALL_AFTER_ERROR_SECONDS: "1" },
  );
  assert.is(lastLine(stdout), "5 passed, 2 failed");
  assert.is(code, 1);
  assert.match(stderr, /the after\(\) hook of a-after\.test\.ts threw, counted as a failure; the run goes on: Error: the after hook failed/);
  assert.not.match(stderr, /could not be loaded/);
  assert.match(stderr, /no test finished in the 1 s \(TEST_RUN_STALL_AFTER_ERROR_SECONDS\) after the event loop ran dry with a test waiting .*: a hang in b-hang\.test\.ts/);
});

test("a test awaiting an unref()'d timer is waited for, not called hung", async () => {
  const { code, stdout, stderr } = await runner({
    "a.test.ts": `import { test } from "uvu";
test("awaits an unref()'d timer", async () => { await new Promise((resolve) => setTimeout(resolve, 300).unref()); });
test("runs after it", () => {});
test.run();
`,
  });
  assert.is(lastLine(stdout), "2 passed, 0 failed", stderr);
  assert.is(code, 0);
});

test("an error that strands its test while a listener keeps the process up ends the run once no test finishes for a while, not at the run's bound", async () => {
  const { code, stdout, stderr } = await runner(
    {
      "a-stranded.test.ts": `import net from "node:net";
import { test } from "uvu";
test("stranded", async () => {
  const server = net.createServer().listen(0);
  await new Promise<void>((resolve) => setTimeout(() => { JSON.parse("{oops"); resolve(); }, 10));
  server.close();
});
test.run();
`,
    },
    { TEST_RUN_STALL_AFTER_ERROR_SECONDS: "2", TEST_RUN_TIMEOUT_MINUTES: "5" },
  );
  assert.match(stderr, "no test finished in the 2 s (TEST_RUN_STALL_AFTER_ERROR_SECONDS) after an error outside a test");
  assert.is(lastLine(stdout), "0 passed, 2 failed");
  assert.is(code, 1);
});

test("errors that keep coming (a throwing setInterval) do not put off the end of a stalled run", async () => {
  const { code, stdout, stderr, ms } = await runner(
    {
      "a.test.ts": `import net from "node:net";
import { test } from "uvu";
test("stranded while an interval throws", async () => {
  net.createServer().listen(0);
  setInterval(() => { throw new Error("the interval threw"); }, 200);
  await new Promise(() => {});
});
test.run();
`,
    },
    { TEST_RUN_STALL_AFTER_ERROR_SECONDS: "2", TEST_RUN_TIMEOUT_MINUTES: "5" },
  );
  assert.ok(ms < 15_000, `took ${ms} ms`);
  assert.match(lastLine(stdout) ?? "", /^0 passed, \d+ failed$/);
  assert.is(code, 1);
  assert.match(stderr, "no test finished in the 2 s (TEST_RUN_STALL_AFTER_ERROR_SECONDS)");
});

test("process.exit() anywhere fails the run: in a timer after a failed test (behind a fake summary), at load, in a test; the files after it run", async () => {
  const { code, stdout, stderr } = await runner({
    "a-exit-in-timer.test.ts": `import { test } from "uvu";
import * as assert from "uvu/assert";
test("fails", () => assert.is(1, 2));
test("then a timer exits", async () => {
  setTimeout(() => { console.log("9 passed, 0 failed"); process.exit(0); }, 20);
  await new Promise((resolve) => setTimeout(resolve, 500));
});
test.run();
`,
    "b-exit-at-load.test.ts": `import { test } from "uvu";
test("never runs", () => {});
process.exit(0);
test.run();
`,
    "c-exit-in-test.test.ts": `import { test } from "uvu";
test("passes", () => {});
test("exits", () => { process.exit(0); });
test.run();
`,
    "d-later.test.ts": passingLater,
  });
  assert.is(lastLine(stdout), "2 passed, 4 failed");
  assert.is(code, 1);
  assert.match(stderr, /the test process exited with code \d+ in a-exit-in-timer\.test\.ts/);
  assert.match(stderr, /the test process exited with code \d+ while b-exit-at-load\.test\.ts was loading/);
  assert.match(stderr, /the test process exited with code \d+ in c-exit-in-test\.test\.ts/);
});

test("a loop that never yields is ended at the run's bound, and the summary line stands on a line of its own", async () => {
  const { code, stdout, stderr, ms } = await runner(
    {
      "a.test.ts": `import { test } from "uvu";
test("passes", () => {});
test("spins", () => { for (;;) {} });
test.run();
`,
    },
    { TEST_RUN_TIMEOUT_MINUTES: "0.05", FORCE_COLOR: "1" },
  );
  assert.ok(stdout.endsWith("\n1 passed, 1 failed\n"), JSON.stringify(stdout.slice(-80)));
  assert.is(code, 1);
  assert.match(stderr, /the run passed 0\.05 minutes \(TEST_RUN_TIMEOUT_MINUTES\): a hang in a\.test\.ts/);
  assert.ok(ms < 20_000, `took ${ms} ms`);
});

test("tests left out fail the run, each named: test.only, test.skip, a file that never calls run(), a throwing before() hook (its reason said)", async () => {
  const { code, stdout, stderr } = await runner({
    "a-only.test.ts": `import { test } from "uvu";
test.only("only this", () => {});
test("left out", () => {});
test.run();
`,
    "b-skip.test.ts": `import { test } from "uvu";
test("runs", () => {});
test.skip("skipped", () => {});
test.run();
`,
    "c-no-run.test.ts": `import { test } from "uvu";
test("never queued", () => {});
`,
    "d-before.test.ts": `import { suite } from "uvu";
const s = suite("set-up");
s.before(() => { throw new Error("why the set-up failed"); });
s("one", () => {});
s("two", () => {});
s.run();
`,
  });
  assert.is(lastLine(stdout), "2 passed, 5 failed");
  assert.is(code, 1);
  assert.match(stderr, 'test.only("only this") in a-only.test.ts');
  assert.match(stderr, 'test.skip("skipped") in b-skip.test.ts');
  assert.match(stderr, "c-no-run.test.ts ran no test");
  assert.match(stderr, /the before\(\) hook of suite "set-up" in d-before\.test\.ts threw.*: Error: why the set-up failed/);
});

test("a process a test left running is reported and stopped, not waited for", async () => {
  const { code, stdout, stderr, ms } = await runner({
    "a.test.ts": `import { spawn } from "node:child_process";
import { test } from "uvu";
test("leaves a child running", () => { spawn("sleep", ["20"], { stdio: "inherit" }); });
test.run();
`,
  });
  assert.is(lastLine(stdout), "1 passed, 1 failed");
  assert.is(code, 1);
  assert.match(stderr, /the tests left processes running once they were done \(stopped now\):\s+\d+ sleep 20/);
  assert.ok(ms < 15_000, `took ${ms} ms`);
});

test("wrong settings and a filter that matches nothing fail, saying why", async () => {
  for (const [name, value] of [
    ["TEST_RUN_TIMEOUT_MINUTES", ""],
    ["TEST_RUN_TIMEOUT_MINUTES", "50000"],
    ["TEST_RUN_STALL_AFTER_ERROR_SECONDS", "abc"],
  ] as const) {
    const { code, stdout, stderr } = await runner({ "a.test.ts": passingLater }, { [name]: value });
    assert.is(lastLine(stdout), "0 passed, 1 failed", `${name}=${value}`);
    assert.is(code, 1);
    assert.match(stderr, `${name}=${JSON.stringify(value)} is not a number of`);
  }
  const nothing = await runner({ "a.test.ts": passingLater }, {}, ["no-such-file"]);
  assert.is(lastLine(nothing.stdout), "0 passed, 1 failed");
  assert.is(nothing.code, 1);
  assert.match(nothing.stderr, 'has "no-such-file" in its path');
  const two = await runner({ "a.test.ts": passingLater }, {}, ["a.test", "b.test"]);
  assert.is(lastLine(two.stdout), "0 passed, 1 failed");
  assert.match(two.stderr, "npm test takes one filter");
});

test.run();

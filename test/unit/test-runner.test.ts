// test/run.ts on test files written for it into a folder of their own
// (TEST_RUN_DIR): its summary line is what CI trusts, so a run that failed
// must never end in "N passed, 0 failed", and must always end in the line.
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

/** Runs test/run.ts on `files` (name → source); resolves with its exit code, stdout and stderr. */
async function runner(files: Record<string, string>, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "run-ts-"));
  try {
    await fs.symlink(path.join(repo, "node_modules"), path.join(dir, "node_modules"));
    for (const [name, source] of Object.entries(files)) await fs.writeFile(path.join(dir, name), source);
    return await new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ["--import", "tsx", path.join(repo, "test/run.ts")], {
        cwd: repo,
        env: { ...process.env, TEST_RUN_DIR: dir, ...env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
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

test("a throwing after() hook and a test that waits forever fail the run, and the files after them run", async () => {
  const { code, stdout, stderr } = await runner({
    "a-after.test.ts": `import { test } from "uvu";
test.after(() => { throw new Error("the after hook failed"); });
test("one", () => {});
test("two", () => {});
test("three", () => {});
test.run();
`,
    "b-hang.test.ts": `import { test } from "uvu";
test("waits forever", async () => { await new Promise(() => {}); });
test.run();
`,
    "c-later.test.ts": passingLater,
  });
  assert.is(lastLine(stdout), "4 passed, 2 failed");
  assert.is(code, 1);
  assert.match(stderr, /an after\(\) hook in a-after\.test\.ts threw/);
  assert.not.match(stderr, /could not be loaded/);
  assert.match(stderr, /a test in b-hang\.test\.ts waits on something nothing can settle/);
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
  assert.match(stderr, "no test finished in the 2 s after that error");
  assert.is(lastLine(stdout), "0 passed, 2 failed");
  assert.is(code, 1);
});

test.run();

import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "uvu";
import * as assert from "uvu/assert";

const loggerModule = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), "../../src/ops/logger.ts")).href;

/** Runs a child that logs through the stdout destination; resolves with each stdout line and when it arrived. */
function child(script: string): Promise<Array<{ line: string; atMs: number }>> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const proc = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", `import { createLogger } from ${JSON.stringify(loggerModule)};\n${script}`], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const lines: Array<{ line: string; atMs: number }> = [];
    let rest = "";
    proc.stdout.on("data", (chunk: Buffer) => {
      const parts = (rest + chunk.toString()).split("\n");
      rest = parts.pop()!;
      for (const line of parts) lines.push({ line, atMs: performance.now() - started });
    });
    proc.once("error", reject);
    proc.once("close", () => resolve(lines));
  });
}

test("a lone line reaches stdout while the process is still running, not only at exit", async () => {
  // The child logs once, marks the moment on stdout directly, and lives 2 s more.
  const lines = await child(
    `import fs from "node:fs"; const log = createLogger("info"); setTimeout(() => { log.info("lone line"); fs.writeSync(1, "marker\\n"); }, 100); setTimeout(() => fs.writeSync(1, "exiting\\n"), 2100);`,
  );
  const at = (text: string) => lines.find((l) => l.line.includes(text))?.atMs;
  const [marker, lone, exiting] = [at("marker"), at("lone line"), at("exiting")];
  assert.ok(marker !== undefined && lone !== undefined && exiting !== undefined, JSON.stringify(lines));
  assert.ok(lone - marker < 1_000, `written ${(lone - marker).toFixed(0)} ms after it was made`);
  assert.ok(lone < exiting, "written before the child began to exit");
});

test("lines still buffered when the process exits are written", async () => {
  const lines = await child(`const log = createLogger("info"); for (let i = 0; i < 3; i++) log.info("line " + i); process.exit(0);`);
  assert.equal(
    lines.map((l) => JSON.parse(l.line).msg),
    ["line 0", "line 1", "line 2"],
  );
});

test.run();

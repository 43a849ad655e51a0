import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { test } from "uvu";
import * as assert from "uvu/assert";

const loggerModule = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), "../../src/ops/logger.ts")).href;

/** Runs a child that logs through the stdout destination; resolves with each stdout line. */
function child(script: string): Promise<Array<{ line: string }>> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", `import { createLogger } from ${JSON.stringify(loggerModule)};\n${script}`], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const lines: Array<{ line: string }> = [];
    let rest = "";
    proc.stdout.on("data", (chunk: Buffer) => {
      const parts = (rest + chunk.toString()).split("\n");
      rest = parts.pop()!;
      for (const line of parts) lines.push({ line });
    });
    proc.once("error", reject);
    proc.once("close", () => resolve(lines));
  });
}

test("lines not yet written when the process exits are written", async () => {
  const lines = await child(`const log = createLogger("info"); for (let i = 0; i < 3; i++) log.info("line " + i); process.exit(0);`);
  assert.equal(
    lines.map((l) => JSON.parse(l.line).msg),
    ["line 0", "line 1", "line 2"],
  );
});

test.run();

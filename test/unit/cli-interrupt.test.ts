// A command interrupted (Ctrl-C, a CI runner's SIGTERM) leaves no scratch
// file behind and exits as the signal would have: run in a child process,
// which signals itself while a scratch file is registered.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";

const module = new URL("../../src/cli/interrupt.ts", import.meta.url).href;

async function interrupted(signal: "SIGINT" | "SIGTERM"): Promise<{ ended: NodeJS.Signals | number | null; left: boolean; kept: boolean }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-interrupt-"));
  const scratch = path.join(dir, ".pkg.tgz.part");
  const done = path.join(dir, "done.part");
  const code = `
    import fs from "node:fs";
    const { removeOnInterrupt } = await import(${JSON.stringify(module)});
    fs.writeFileSync(${JSON.stringify(scratch)}, "half");
    removeOnInterrupt(${JSON.stringify(scratch)});
    fs.writeFileSync(${JSON.stringify(done)}, "kept by the command");
    removeOnInterrupt(${JSON.stringify(done)})();
    process.kill(process.pid, ${JSON.stringify(signal)});
    setTimeout(() => process.exit(0), 5000);`;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], { stdio: "inherit" });
  const exit = await new Promise<NodeJS.Signals | number | null>((resolve) => child.on("exit", (c, s) => resolve(s ?? c)));
  const result = { ended: exit, left: fs.existsSync(scratch), kept: fs.existsSync(done) };
  fs.rmSync(dir, { recursive: true, force: true });
  return result;
}

test("Ctrl-C removes the registered scratch file and the process dies of SIGINT (a shell's 130, which stops its loop); SIGTERM likewise; a file the command forgot is left to it", async () => {
  assert.equal(await interrupted("SIGINT"), { ended: "SIGINT", left: false, kept: true });
  assert.equal(await interrupted("SIGTERM"), { ended: "SIGTERM", left: false, kept: true });
});

test.run();

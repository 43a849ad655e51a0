// Runs every test/**/*.test.ts with uvu in one process and ends with the
// plain summary line CI reads: "N passed, N failed".
//
// uvu's own runner hides two failures: a suite whose before() hook throws
// counts as passing, and a file that fails to import stops the run with no
// count. This runner counts both as failures.
import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

type SuiteRun = () => Promise<[string | true, number, number, number]>;
declare global {
  var UVU_DEFER: number | undefined;
  var UVU_INDEX: number | undefined;
  var UVU_QUEUE: Array<Array<string | null | SuiteRun>>;
}

const root = path.dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2];

function find(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const full = path.join(dir, name);
      if (statSync(full).isDirectory()) return find(full);
      return name.endsWith(".test.ts") ? [full] : [];
    });
}

const files = find(root).filter((f) => filter === undefined || f.includes(filter));
globalThis.UVU_DEFER = 1;
globalThis.UVU_QUEUE = [];
const uvu = await import("uvu");

let passed = 0;
let failed = 0;
for (const [index, file] of files.entries()) {
  globalThis.UVU_INDEX = index;
  globalThis.UVU_QUEUE.push([path.relative(root, file)]);
  try {
    await import(pathToFileURL(file).href);
  } catch (error) {
    failed++;
    console.error(`\n  FAIL  ${path.relative(root, file)} could not be loaded:`, error);
  }
}

// Wrap every suite to read its counts: [errors, ran, skipped, total].
for (const group of globalThis.UVU_QUEUE) {
  for (let i = 1; i < group.length; i++) {
    const run = group[i] as SuiteRun;
    group[i] = async () => {
      const result = await run();
      const [, ran, , total] = result;
      passed += ran;
      failed += total - ran;
      // A throwing hook leaves ran < total with no error text: make uvu see it.
      if (ran < total && result[0] === true) result[0] = `  ${total - ran} test(s) did not run: a hook failed (see above)\n`;
      return result;
    };
  }
}

await uvu.exec(false);
const { stopSharedAzurite } = await import("./support/env.js");
await stopSharedAzurite();
console.log(`${passed} passed, ${failed} failed`);
// Exit even if a leaked handle (a client, a timer) would keep the process up.
process.exit(failed > 0 ? 1 : 0);

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { devTokensSigned, existingLocalSecret, localSecret, LocalSecretError } from "../../src/local-secret.js";

const fresh = () => fs.mkdtempSync(path.join(os.tmpdir(), "ev-secret-"));

test("a secret is made on first use (32 random bytes, mode 0600) and read back the same after", () => {
  const dir = fresh();
  const file = path.join(dir, "page-token-secret");
  assert.is(existingLocalSecret(file, "page tokens"), undefined);
  const made = localSecret(file, "page tokens");
  assert.is(made.length, 32);
  assert.is(fs.statSync(file).mode & 0o777, 0o600);
  assert.equal(localSecret(file, "page tokens"), made);
  assert.equal(existingLocalSecret(file, "page tokens"), made);
  assert.equal(fs.readdirSync(dir), ["page-token-secret"], "nothing else left beside it");
  fs.rmSync(dir, { recursive: true });
});

test("a secret whose write fails (here a file size limit, as a full disk) is not written at all: no empty secret is used, and the next start makes a whole one", () => {
  const dir = fresh();
  const file = path.join(dir, "page-token-secret");
  // The limit fails the write, after the file is created; the signal it
  // sends would kill the process instead, so it is ignored. Its output goes
  // to a pipe, which the limit does not bound.
  const script = `
    import { localSecret } from ${JSON.stringify(path.resolve("src/local-secret.ts"))};
    try { console.log("made " + localSecret(${JSON.stringify(file)}, "page tokens").length + " bytes"); } catch (error) { console.log("failed " + error.code); }
  `;
  const run = spawnSync("sh", ["-c", `trap '' XFSZ; ulimit -f 0 && exec "${process.execPath}" --import tsx --input-type=module -e "$0"`, script], { encoding: "utf8" });
  assert.is(run.status, 0, run.stderr);
  assert.is(run.stdout.trim(), "failed EFBIG");
  assert.equal(fs.readdirSync(dir), [], "no file left, empty or not");
  assert.is(localSecret(file, "page tokens").length, 32);
  fs.rmSync(dir, { recursive: true });
});

test("an empty or cut-short secret file is refused, naming the file and what to do, not used as a key anyone can guess", () => {
  const dir = fresh();
  const file = path.join(dir, "page-token-secret");
  for (const [text, says] of [
    ["", "holds no secret (it is empty)"],
    ["\n", "holds no secret (it is empty)"],
    [Buffer.alloc(31, 7).toString("base64"), "holds a secret of 31 bytes"],
  ] as const) {
    fs.writeFileSync(file, text);
    for (const read of [() => localSecret(file, "page tokens (the page_token of listings under way)"), () => existingLocalSecret(file, "page tokens (the page_token of listings under way)")]) {
      try {
        read();
        assert.unreachable(`accepted ${JSON.stringify(text)}`);
      } catch (error) {
        assert.instance(error, LocalSecretError, String(error));
        assert.match((error as Error).message, `${file} ${says}, not the 32 random bytes the service writes there`);
        assert.match((error as Error).message, "delete the file, and the next start of the service writes a new one; page tokens (the page_token of listings under way) signed with the old one are then refused.");
      }
    }
    assert.is(fs.readFileSync(file, "utf8"), text, "left as it was");
  }
  fs.rmSync(dir, { recursive: true });
});

test("npm run token refuses a cut-short development secret as the service does, naming the file", () => {
  const dir = fresh();
  fs.writeFileSync(path.join(dir, "auth-dev-secret"), "");
  const minted = spawnSync(process.execPath, ["--import", "tsx", "src/tools/mint-token.ts"], { env: { PATH: process.env["PATH"] ?? "", DATA_DIR: dir }, encoding: "utf8" });
  assert.is(minted.status, 2, minted.stderr);
  assert.is(minted.stdout, "", "no token printed");
  assert.match(minted.stderr, `token: ${path.join(dir, "auth-dev-secret")} holds no secret (it is empty)`);
  assert.match(minted.stderr, `${devTokensSigned} signed with the old one are then refused`);
  fs.rmSync(dir, { recursive: true });
});

test.run();

// The CLI's deterministic pack and source hash, on real files in temporary
// folders: the same tree gives the same bytes and hash whatever its mtimes,
// permissions beyond the executable bit, or the order files were written in;
// any change of content, name or executable bit changes both.
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { gunzipSync } from "node:zlib";
import { extract } from "tar-stream";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { CliError } from "../../src/cli/cli-error.js";
import { copyHashedFile, packMtime, packTree } from "../../src/cli/pack.js";
import { hashFiles, sourceHashOfListing } from "../../src/cli/source-hash.js";
import { readPushSource } from "../../src/cli/push-source.js";
import { listSourceTree } from "../../src/cli/source-tree.js";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-pack-"));
let counter = 0;

/** Writes a tree: path → content (a leading "!" in the key marks an executable). */
function makeTree(files: Record<string, string>, order: "forward" | "reverse" = "forward"): string {
  const root = path.join(scratch, `tree-${counter++}`);
  const entries = Object.entries(files);
  for (const [key, content] of order === "forward" ? entries : entries.reverse()) {
    const executable = key.startsWith("!");
    const file = path.join(root, key.replace(/^!/, ""));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, content, { mode: executable ? 0o755 : 0o644 });
    fs.chmodSync(file, executable ? 0o755 : 0o644);
  }
  return root;
}

/** Packs a tree as push does; returns the bytes and the source hash. */
async function packed(root: string): Promise<{ bytes: Buffer; hash: string }> {
  const files = await hashFiles(await listSourceTree(root));
  const out = path.join(scratch, `out-${counter++}.tgz`);
  const result = await packTree(files, out);
  const bytes = fs.readFileSync(out);
  assert.is(result.sizeBytes, bytes.length, "reported size is the file's");
  assert.is(result.md5Base64, createHash("md5").update(bytes).digest("base64"), "reported MD5 is the file's");
  return { bytes, hash: sourceHashOfListing(files) };
}

interface Entry {
  name: string;
  mode: number;
  uid: number;
  gid: number;
  uname: string;
  gname: string;
  mtime: number;
  content: string;
}

/** The entries of a .tgz, read with tar-stream's extractor. */
async function entries(tgz: Buffer): Promise<Entry[]> {
  const ex = extract();
  const out: Entry[] = [];
  const done = new Promise<void>((resolve, reject) => {
    ex.on("entry", (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c: unknown) => chunks.push(c as Buffer));
      stream.on("end", () => {
        out.push({
          name: header.name,
          mode: header.mode ?? -1,
          uid: header.uid ?? -1,
          gid: header.gid ?? -1,
          uname: header.uname ?? "",
          gname: header.gname ?? "",
          mtime: header.mtime?.getTime() ?? -1,
          content: Buffer.concat(chunks).toString("utf8"),
        });
        next();
      });
    });
    ex.on("finish", resolve);
    ex.on("error", reject);
  });
  Readable.from([gunzipSync(tgz)]).pipe(ex);
  await done;
  return out;
}

const sample = {
  "package.json": '{"name":"app"}\n',
  "src/index.js": "console.log(1)\n",
  "src/lib/util.js": "export const x = 1;\n",
  "!bin/run.sh": "#!/bin/sh\necho hi\n",
  "README.md": "# app\n",
};

test("the same tree packs to the same bytes and hash, whatever the mtimes, permissions and write order", async () => {
  const a = makeTree(sample, "forward");
  const b = makeTree(sample, "reverse");
  fs.utimesSync(path.join(b, "src/index.js"), new Date("2001-02-03T04:05:06Z"), new Date("2001-02-03T04:05:06Z"));
  fs.chmodSync(path.join(b, "README.md"), 0o600);
  fs.chmodSync(path.join(b, "bin/run.sh"), 0o700);
  const [pa, pb] = [await packed(a), await packed(b)];
  assert.ok(pa.bytes.equals(pb.bytes), "same bytes");
  assert.is(pa.hash, pb.hash);
  assert.match(pa.hash, /^[0-9a-f]{64}$/);
});

test("the order files are listed in does not change the bytes or the hash", async () => {
  const files = await hashFiles(await listSourceTree(makeTree(sample)));
  const [a, b] = [path.join(scratch, "order-a.tgz"), path.join(scratch, "order-b.tgz")];
  await packTree(files, a);
  await packTree([...files].reverse(), b);
  assert.ok(fs.readFileSync(a).equals(fs.readFileSync(b)));
  assert.is(sourceHashOfListing([...files].reverse()), sourceHashOfListing(files));
});

test("a changed file changes both the bytes and the hash", async () => {
  const a = await packed(makeTree(sample));
  const b = await packed(makeTree({ ...sample, "src/index.js": "console.log(2)\n" }));
  assert.not.ok(a.bytes.equals(b.bytes));
  assert.is.not(a.hash, b.hash);
});

test("a renamed file and a changed executable bit change the hash", async () => {
  const base = (await packed(makeTree(sample))).hash;
  const { "README.md": readme, ...rest } = sample;
  assert.is.not((await packed(makeTree({ ...rest, "README.txt": readme }))).hash, base, "rename");
  const { "!bin/run.sh": script, ...others } = sample;
  assert.is.not((await packed(makeTree({ ...others, "bin/run.sh": script }))).hash, base, "executable bit");
});

test("the hash is SHA-256 over the documented listing, not over the tar or gzip bytes", async () => {
  const root = makeTree({ "b.txt": "B", "!a.sh": "A", "dir/c.txt": "C" });
  const sha = (s: string) => createHash("sha256").update(s).digest("hex");
  const listing = `entity-versions source tree v1\n755 ${sha("A")} a.sh\u0000644 ${sha("B")} b.txt\u0000644 ${sha("C")} dir/c.txt\u0000`;
  const { bytes, hash } = await packed(root);
  assert.is(hash, sha(listing));
  assert.is.not(hash, createHash("sha256").update(bytes).digest("hex"));
});

test("entries are sorted, with fixed mtime, owner 0, no owner names, and modes 0644 / 0755", async () => {
  const list = await entries((await packed(makeTree(sample, "reverse"))).bytes);
  assert.equal(
    list.map((e) => e.name),
    ["README.md", "bin/run.sh", "package.json", "src/index.js", "src/lib/util.js"],
  );
  for (const e of list) {
    assert.is(e.mtime, packMtime.getTime(), e.name);
    assert.is(e.uid, 0);
    assert.is(e.gid, 0);
    assert.is(e.uname, "");
    assert.is(e.gname, "");
    assert.is(e.mode, e.name === "bin/run.sh" ? 0o755 : 0o644, e.name);
  }
  assert.is(list.find((e) => e.name === "src/index.js")?.content, "console.log(1)\n");
});

test("the gzip header has no mtime, no file name and an unknown OS", async () => {
  const { bytes } = await packed(makeTree(sample));
  assert.equal([...bytes.subarray(0, 4)], [0x1f, 0x8b, 8, 0], "magic, deflate, no flags (so no name)");
  assert.equal([...bytes.subarray(4, 8)], [0, 0, 0, 0], "mtime 0");
  assert.is(bytes[9], 255, "OS unknown");
});

test("long and non-ASCII names survive, the same way every time", async () => {
  const long = `${"deep/".repeat(30)}file.txt`;
  const files = { [long]: "x", "données/été.txt": "y", "a.txt": "z" };
  const [a, b] = [await packed(makeTree(files)), await packed(makeTree(files, "reverse"))];
  assert.ok(a.bytes.equals(b.bytes));
  const names = (await entries(a.bytes)).map((e) => e.name);
  assert.equal(names, ["a.txt", long, "données/été.txt"]);
});

test("never packs .git, node_modules or the state file; honours .entityversionsignore", async () => {
  const root = makeTree({
    ...sample,
    ".git/HEAD": "ref",
    "node_modules/dep/index.js": "x",
    "src/node_modules/dep/index.js": "x",
    ".entity-versions.json": "{}",
    ".entity-versions.json.abc123.tmp": "{}",
    ".env": "SECRET=1",
    "logs/today.log": "log",
    "keep.log": "kept by negation",
    ".entityversionsignore": ".env\nlogs/\n*.log\n!keep.log\n",
  });
  const names = (await listSourceTree(root)).map((f) => f.path);
  assert.equal(names, [".entityversionsignore", "README.md", "bin/run.sh", "keep.log", "package.json", "src/index.js", "src/lib/util.js"]);
  // The excluded files do not reach the hash either.
  const withoutJunk = makeTree({ ...sample, "keep.log": "kept by negation", ".entityversionsignore": ".env\nlogs/\n*.log\n!keep.log\n" });
  assert.is((await packed(root)).hash, (await packed(withoutJunk)).hash);
});

test("a symbolic link is refused with its path named", async () => {
  const root = makeTree(sample);
  fs.symlinkSync("README.md", path.join(root, "link.md"));
  try {
    await listSourceTree(root);
    assert.unreachable("should have refused the link");
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "UNSUPPORTED_FILE_TYPE");
    assert.match((error as CliError).message, "link.md is a symbolic link");
  }
});

test("a link to a folder is refused naming the line that ignores it, which then does (a folder's pattern, ending in /, would not)", async () => {
  const root = makeTree({ ...sample, "real/f.txt": "x\n", ".entityversionsignore": "dist/\n" });
  fs.symlinkSync("real", path.join(root, "dist"));
  let told = "";
  try {
    await listSourceTree(root);
    assert.unreachable("should have refused the link");
  } catch (error) {
    assert.instance(error, CliError);
    told = (error as CliError).message;
  }
  const line = /Add the line (\S+) to \.entityversionsignore/.exec(told)?.[1];
  assert.is(line, "/dist", told);
  fs.writeFileSync(path.join(root, ".entityversionsignore"), `${line}\n`);
  const names = (await listSourceTree(root)).map((f) => f.path);
  assert.ok(names.includes("real/f.txt") && !names.some((n) => n.startsWith("dist")), names.join(" "));
});

test("a name that is not UTF-8 is refused with its bytes, unless the ignore file matches it; an empty package file is refused", async () => {
  const root = makeTree({ ...sample, "sub/keep.txt": "k\n" });
  // fs takes a Buffer path as bytes: a name no UTF-8 decoder reads back.
  fs.writeFileSync(Buffer.concat([Buffer.from(path.join(root, "sub") + "/"), Buffer.from([0xff, 0xfe]), Buffer.from(".bin")]), "x");
  try {
    await listSourceTree(root);
    assert.unreachable("should have refused the name");
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "UNSUPPORTED_FILE_NAME");
    assert.match((error as CliError).message, "sub/\uFFFD\uFFFD.bin");
    assert.match((error as CliError).message, "ff fe 2e 62 69 6e");
  }
  fs.writeFileSync(path.join(root, ".entityversionsignore"), "*.bin\n");
  assert.ok((await listSourceTree(root)).some((f) => f.path === "sub/keep.txt"), "ignored, the rest is packed");
  // A folder with nothing left to pack: what to check.
  const bare = fs.mkdtempSync(path.join(scratch, "bare-"));
  fs.mkdirSync(path.join(bare, "node_modules"));
  fs.writeFileSync(path.join(bare, "node_modules", "x.js"), "x");
  try {
    await readPushSource(bare);
    assert.unreachable("should have refused a folder with nothing to pack");
  } catch (error) {
    assert.is((error as CliError).code, "EMPTY_SOURCE");
    assert.match((error as CliError).message, "check the path, and the ignore file's lines");
  }
  // A package.json that starts with a byte order mark, which npm reads: read as npm reads it.
  const bom = fs.mkdtempSync(path.join(scratch, "bom-"));
  fs.writeFileSync(path.join(bom, "package.json"), "\uFEFF" + JSON.stringify({ name: "bom" }));
  const withBom = await readPushSource(bom);
  assert.equal(withBom.kind === "directory" ? withBom.packageJson : undefined, { name: "bom" });
  const empty = path.join(scratch, `empty-${counter++}.tgz`);
  fs.writeFileSync(empty, "");
  try {
    await readPushSource(empty);
    assert.unreachable("should have refused the empty file");
  } catch (error) {
    assert.is((error as CliError).code, "EMPTY_SOURCE");
    assert.match((error as CliError).message, "is empty");
  }
});

test("a file changed between hashing and packing stops the pack", async () => {
  const root = makeTree(sample);
  const files = await hashFiles(await listSourceTree(root));
  fs.writeFileSync(path.join(root, "src/index.js"), "console.log(9)\n");
  try {
    await packTree(files, path.join(scratch, "changed.tgz"));
    assert.unreachable("should have noticed the change");
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SOURCE_CHANGED");
  }
});

test.after(() => fs.rmSync(scratch, { recursive: true, force: true }));

test("the lockfile is uploaded from a copy checked against its hash: changed, or replaced by a link, it stops the push", async () => {
  const root = makeTree({ "package-lock.json": '{"lockfileVersion":3}', "src/a.js": "a" });
  const secret = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-secret-")), "id_rsa");
  fs.writeFileSync(secret, "private key");
  const lockfile = async () => (await hashFiles(await listSourceTree(root))).find((f) => f.path === "package-lock.json")!;
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-copy-")), "package-lock.json");
  const copied = await copyHashedFile(await lockfile(), out);
  assert.is(fs.readFileSync(out, "utf8"), '{"lockfileVersion":3}');
  assert.equal(copied, { sizeBytes: 21, md5Base64: createHash("md5").update('{"lockfileVersion":3}').digest("base64") });
  for (const swap of [() => fs.writeFileSync(path.join(root, "package-lock.json"), '{"lockfileVersion":2}'), () => {
    fs.rmSync(path.join(root, "package-lock.json"));
    fs.symlinkSync(secret, path.join(root, "package-lock.json"));
  }]) {
    fs.writeFileSync(path.join(root, "package-lock.json"), '{"lockfileVersion":3}');
    const hashed = await lockfile();
    swap();
    try {
      await copyHashedFile(hashed, out);
      assert.unreachable("a changed lockfile was copied");
    } catch (error) {
      assert.instance(error, CliError);
      assert.is((error as CliError).code, "SOURCE_CHANGED");
    }
    fs.rmSync(path.join(root, "package-lock.json"));
  }
  // A copy that cannot be written (a full temporary folder: /dev/full answers every write ENOSPC) is the copy's failure, not the source's.
  fs.writeFileSync(path.join(root, "package-lock.json"), '{"lockfileVersion":3}');
  try {
    await copyHashedFile(await lockfile(), "/dev/full");
    assert.unreachable("a copy to a full disk succeeded");
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SCRATCH_UNWRITABLE", (error as Error).message);
    assert.match((error as Error).message, "(ENOSPC): make room in /dev, or point TMPDIR at a folder with room for the package");
  }
});

test.run();

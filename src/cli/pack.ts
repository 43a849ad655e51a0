import { createHash, type Hash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { dirname } from "node:path";
import { Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import { constants as zlibConstants, createGzip } from "node:zlib";
import { pack as tarPack } from "tar-stream";
import { CliError } from "./cli-error.js";
import type { HashedFile } from "./source-hash.js";
import { comparePaths, unreadableSource } from "./source-tree.js";

/**
 * The mtime of every entry: a fixed instant (the one npm packs with), so
 * that the bytes do not depend on when files were checked out or touched.
 */
export const packMtime = new Date("1985-10-26T08:15:00.000Z");

/** Fixed so that the compressed bytes do not follow a default that may change. */
const gzipLevel = 6;

/** RFC 1952's "unknown" operating system, written instead of the one zlib was built for. */
const gzipOsUnknown = 255;
const gzipOsOffset = 9;

/** What a pack wrote: its size and MD5 (base64, as Azure reports Content-MD5). */
export interface PackResult {
  readonly sizeBytes: number;
  readonly md5Base64: string;
}

/** Passes bytes through while feeding them to hashes and counting them. */
class Meter extends Transform {
  bytes = 0;
  constructor(private readonly hashes: Hash[]) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.length;
    for (const h of this.hashes) h.update(chunk);
    done(null, chunk);
  }
}

/**
 * Sets the gzip header's OS byte to "unknown". zlib writes the OS it was
 * built for there (3 on Unix, 10 on Windows); the header has no checksum of
 * its own, and its mtime is already 0 and no file name is written.
 */
class GzipHeaderNormaliser extends Transform {
  #seen = 0;
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.#seen <= gzipOsOffset && this.#seen + chunk.length > gzipOsOffset) chunk[gzipOsOffset - this.#seen] = gzipOsUnknown;
    this.#seen += chunk.length;
    done(null, chunk);
  }
}

/**
 * Packs a listed, hashed tree into a deterministic `.tgz` at `out`:
 * regular files only, sorted by path (UTF-8 bytes, whatever order they are
 * given in), named by their relative paths, mode 0755 or 0644, uid and gid
 * 0, no user or group name, mtime {@link packMtime}; long or non-ASCII
 * names in PAX headers;
 * gzip at a fixed level with mtime 0, no name and an unknown OS. The same
 * tree therefore gives the same bytes (with the same zlib). Each file's
 * content is hashed again as it is packed: a file changed since it was
 * hashed would make the package disagree with its source hash, so that
 * stops the push instead.
 */
export async function packTree(files: readonly HashedFile[], out: string): Promise<PackResult> {
  const tar = tarPack();
  const md5 = createHash("md5");
  const meter = new Meter([md5]);
  const written = pipeline(
    tar,
    createGzip({ level: gzipLevel, strategy: zlibConstants.Z_DEFAULT_STRATEGY }),
    new GzipHeaderNormaliser(),
    meter,
    createWriteStream(out),
  );
  // A failure of the output side (disk full) must not be left unhandled while entries are still being added.
  written.catch(() => {});
  try {
    for (const file of [...files].sort((a, b) => comparePaths(a.path, b.path))) {
      const entry = tar.entry({
        name: file.path,
        type: "file",
        size: file.size,
        mode: file.executable ? 0o755 : 0o644,
        mtime: packMtime,
        uid: 0,
        gid: 0,
        uname: "",
        gname: "",
      });
      const sha256 = createHash("sha256");
      try {
        await pipeline(createReadStream(file.absolute), new Meter([sha256]), entry);
      } catch (error) {
        throw readFailure(file.path, error);
      }
      if (sha256.digest("hex") !== file.sha256) throw changed(file.path);
    }
    tar.finalize();
    await written;
  } catch (error) {
    tar.destroy();
    await written.catch(() => {});
    throw error;
  }
  return { sizeBytes: meter.bytes, md5Base64: md5.digest("base64") };
}

/**
 * Copies one hashed file of the tree to `out` as it was hashed: its bytes
 * are hashed again on the way, and a file changed (or replaced, by a link
 * to somewhere else) since the tree was listed stops the push, as in
 * packTree. The lockfile goes up from this copy, never from its path in
 * the tree, so what is uploaded is what the source hash describes.
 */
export async function copyHashedFile(file: HashedFile, out: string): Promise<PackResult> {
  const sha256 = createHash("sha256");
  const md5 = createHash("md5");
  const meter = new Meter([sha256, md5]);
  const sink = createWriteStream(out);
  let writeFailed: unknown;
  sink.once("error", (error) => (writeFailed = error));
  try {
    await pipeline(createReadStream(file.absolute), meter, sink);
  } catch (error) {
    // The copy's side (a full temporary folder) is not the source's fault.
    if (writeFailed !== undefined) throw scratchFailure(out, writeFailed);
    throw readFailure(file.path, error);
  }
  if (sha256.digest("hex") !== file.sha256) throw changed(file.path);
  return { sizeBytes: meter.bytes, md5Base64: md5.digest("base64") };
}

/** The scratch copy could not be written: where, why, and what to do. */
function scratchFailure(out: string, cause: unknown): CliError {
  const code = (cause as NodeJS.ErrnoException).code ?? (cause as Error).message;
  const err = new CliError(
    `cannot write the copy that is uploaded, ${out} (${code}): make room in ${dirname(out)}, or point TMPDIR at a folder with room for the package.`,
    "SCRATCH_UNWRITABLE",
  );
  err.cause = cause;
  return err;
}

/** A file that vanished or changed size is a changed tree; anything else (permissions) is named with the way around it. */
function readFailure(file: string, cause: unknown): CliError {
  const code = (cause as NodeJS.ErrnoException).code;
  if (code !== undefined && code !== "ENOENT") return unreadableSource(file, cause);
  return changed(file, cause);
}

function changed(file: string, cause?: unknown): CliError {
  const err = new CliError(`${file} changed while it was being packed: push again once nothing is writing to it.`, "SOURCE_CHANGED");
  if (cause !== undefined) err.cause = cause;
  return err;
}

import { createHash } from "node:crypto";
import { sha256OfFile } from "./file-digest.js";
import { comparePaths, type SourceFile, unreadableSource, vanishedSource } from "./source-tree.js";

/** A file of a tree with the SHA-256 of its content (lowercase hex). */
export interface HashedFile extends SourceFile {
  readonly sha256: string;
}

/**
 * The first line of the canonical listing: names the definition, so a
 * future change of it gives different hashes rather than colliding ones.
 */
const listingHeader = "entity-versions source tree v1\n";

/**
 * The source hash of a tree: SHA-256 over a canonical listing, one record
 * per file in path order (UTF-8 bytes; the files are sorted here), `<mode> <sha256 of content> <path>`
 * ended by a NUL byte (which no path contains), mode `755` for executables
 * and `644` otherwise. It depends on the paths, the contents and the
 * executable bit only: not on mtimes, owners or how the tar or gzip bytes
 * come out, so the same tree has the same hash on every machine and a
 * change to any file's bytes, name or executable bit changes it.
 */
export function sourceHashOfListing(files: readonly Pick<HashedFile, "path" | "executable" | "sha256">[]): string {
  const hash = createHash("sha256").update(listingHeader);
  const sorted = [...files].sort((a, b) => comparePaths(a.path, b.path));
  for (const file of sorted) hash.update(`${file.executable ? "755" : "644"} ${file.sha256} ${file.path}\0`);
  return hash.digest("hex");
}

/**
 * Hashes each file of a listed tree (one at a time: the disk is the bound,
 * not the CPU). A file that cannot be read is named by its path in the
 * tree, with the way around it.
 */
export async function hashFiles(files: readonly SourceFile[]): Promise<HashedFile[]> {
  const hashed: HashedFile[] = [];
  for (const file of files) {
    let sha256: string;
    try {
      sha256 = await sha256OfFile(file.absolute);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") throw vanishedSource(file.path, error);
      throw unreadableSource(file.path, error);
    }
    hashed.push({ ...file, sha256 });
  }
  return hashed;
}

import fs from "node:fs/promises";
import path from "node:path";
import ignore, { type Ignore } from "ignore";
import { CliError } from "./cli-error.js";
import { ExitCode } from "./exit-codes.js";
import { stateFileName, stateLockName } from "./state-file.js";

/** The ignore file read at the root of a pushed directory (gitignore syntax). */
export const ignoreFileName = ".entityversionsignore";

/**
 * Names never packed, at any depth: version control, installed
 * dependencies (the lockfile says how to get them back) and the CLI's own
 * state, which would otherwise change the source hash on every push.
 */
export const alwaysExcluded: readonly string[] = Object.freeze([".git", "node_modules", stateFileName, stateLockName]);

/** Whether a file or folder name is never packed: {@link alwaysExcluded}, or a state file's temporary a killed CLI left. */
function isAlwaysExcluded(name: string): boolean {
  return alwaysExcluded.includes(name) || (name.startsWith(`${stateFileName}.`) && name.endsWith(".tmp"));
}

/** One regular file of a pushed tree. */
export interface SourceFile {
  /** Path relative to the root, with "/" separators: the tar entry name and the hash listing's path. */
  readonly path: string;
  readonly absolute: string;
  /** Whether the owner may execute it: packed as 0755, else 0644. */
  readonly executable: boolean;
  readonly size: number;
}

/**
 * Orders paths by their UTF-8 bytes, not by UTF-16 code units or a locale,
 * so that every platform sorts a tree the same way.
 */
export function comparePaths(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/**
 * A file or folder of the tree that cannot be read (permissions, mostly),
 * named by its path in the tree: the errno alone, with an absolute path and
 * a syscall, would not say that the way out may be to ignore it. `rel` is
 * "" for the pushed folder itself, which cannot be ignored, so `root` names it.
 */
export function unreadableSource(rel: string, cause: unknown, root = ""): CliError {
  const code = (cause as NodeJS.ErrnoException).code ?? (cause instanceof Error ? cause.message : String(cause));
  const err = new CliError(
    rel === ""
      ? `cannot read ${root} (${code}): make it readable, or push another folder.`
      : `cannot read ${rel} (${code}): make it readable, or add /${rel} to ${ignoreFileName}.`,
    "SOURCE_UNREADABLE",
  );
  err.cause = cause;
  return err;
}

/** A file or folder gone between being listed and being read: the tree is being written to. */
export function vanishedSource(rel: string, cause: unknown): CliError {
  const err = new CliError(`${rel} changed while it was being read: push again once nothing is writing to the tree.`, "SOURCE_CHANGED");
  err.cause = cause;
  return err;
}

/** Reads the root's ignore file into a matcher; no file means nothing but the fixed exclusions. */
async function loadIgnore(root: string): Promise<Ignore> {
  const matcher = ignore();
  let text: string;
  try {
    text = await fs.readFile(path.join(root, ignoreFileName), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return matcher;
    // Unlike another file it cannot be left out: it says what is left out.
    const err = new CliError(`cannot read ${ignoreFileName} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): make it readable.`, "SOURCE_UNREADABLE");
    err.cause = error;
    throw err;
  }
  return matcher.add(text);
}

/**
 * The files of a directory that a push packs, sorted by path: regular files
 * only, minus {@link alwaysExcluded} and what the root's
 * `.entityversionsignore` excludes. Empty directories are not part of a
 * tree. A symbolic link (or a socket, a device) is refused with the path
 * named: following it could pack files from outside the tree and storing it
 * would make the package depend on where it is unpacked, so the user either
 * ignores it or replaces it with the file.
 */
export async function listSourceTree(root: string): Promise<SourceFile[]> {
  // First: in a folder that cannot be read, the ignore file is the first
  // thing that fails, and naming it would send the user to the wrong file.
  try {
    await fs.access(root, fs.constants.R_OK | fs.constants.X_OK);
  } catch (error) {
    throw unreadableSource("", error, root);
  }
  const matcher = await loadIgnore(root);
  const files: SourceFile[] = [];
  const walk = async (dir: string, relative: string): Promise<void> => {
    // Read as bytes: a name that is not UTF-8 would otherwise be read as
    // another name, of a file that does not exist.
    let entries;
    try {
      entries = await fs.readdir(dir, { withFileTypes: true, encoding: "buffer" });
    } catch (error) {
      if (relative !== "" && (error as NodeJS.ErrnoException).code === "ENOENT") throw vanishedSource(relative, error);
      throw unreadableSource(relative, error, root);
    }
    for (const entry of entries) {
      const name = entry.name.toString("utf8");
      if (isAlwaysExcluded(name)) continue;
      const rel = relative === "" ? name : `${relative}/${name}`;
      if (!Buffer.from(name, "utf8").equals(entry.name)) {
        if (matcher.ignores(entry.isDirectory() ? `${rel}/` : rel)) continue;
        throw new CliError(
          `${rel} (shown with � for its bytes ${entry.name.toString("hex").replace(/(..)(?!$)/g, "$1 ")}) has a name that is not UTF-8: package paths are UTF-8. Rename it, or add a pattern that matches it to ${ignoreFileName}.`,
          "UNSUPPORTED_FILE_NAME",
          ExitCode.failure,
        );
      }
      const absolute = path.join(dir, name);
      if (entry.isDirectory()) {
        if (!matcher.ignores(`${rel}/`)) await walk(absolute, rel);
        continue;
      }
      if (matcher.ignores(rel)) continue;
      if (!entry.isFile()) {
        const kind = entry.isSymbolicLink() ? "a symbolic link" : "not a regular file";
        // As in .gitignore, a pattern ending in "/" matches folders only, and a link to one is not a folder.
        throw new CliError(
          `${rel} is ${kind}: packages hold regular files only. Add the line /${rel} to ${ignoreFileName} (with no "/" at its end: ${entry.isSymbolicLink() ? "a link, even to a folder, is not a folder" : "it is not a folder"}), or replace it with the file it stands for.`,
          "UNSUPPORTED_FILE_TYPE",
          ExitCode.failure,
        );
      }
      let stat;
      try {
        stat = await fs.stat(absolute);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") throw vanishedSource(rel, error);
        // Listed but not statable: the folder is readable but not searchable (no x bit), so it is the one to name.
        throw unreadableSource(relative, error, root);
      }
      files.push({ path: rel, absolute, executable: (stat.mode & 0o100) !== 0, size: stat.size });
    }
  };
  await walk(root, "");
  return files.sort((a, b) => comparePaths(a.path, b.path));
}

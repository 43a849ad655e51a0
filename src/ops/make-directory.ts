import fs from "node:fs";
import path from "node:path";

/**
 * Creates `dir` and the folders above it that are missing, as
 * `fs.mkdirSync(dir, { recursive: true })` would, failing with the error of
 * the step that cannot be made. Why: Node's recursive mkdir tells it badly: on
 * a read-only file system it reports ENOENT (a plain mkdir says EROFS),
 * and it names the folder asked for, not the one that refused it nor the
 * file in the way, so the start-up hint could not say what to fix.
 */
export function makeDirectory(dir: string): void {
  if (isFolder(dir)) return;
  // Step by step, never Node's recursive mkdir: where mkdir answers ENOENT
  // under a folder that exists (a path under /proc), that one loops for
  // ever, and the start would hang silent.
  const cause = stepThatFails(path.resolve(dir));
  if (cause !== undefined) throw cause;
  if (!isFolder(dir)) throw failure("ENOTDIR", dir, `ENOTDIR: not a directory, mkdir '${dir}'`);
}

function isFolder(file: string): boolean {
  try {
    return fs.statSync(file).isDirectory();
  } catch {
    return false;
  }
}

/** An error as Node's own for a failed mkdir: `code`, `syscall` and `path` say what failed. */
function failure(code: string, at: string, message: string, more: object = {}): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code, syscall: "mkdir", path: at }, more);
}

/**
 * Makes the missing folders of `dir` one at a time, outermost first, from
 * the innermost one that exists, and returns the error of the first that
 * cannot be made; undefined when all are.
 */
function stepThatFails(dir: string): NodeJS.ErrnoException | undefined {
  const missing: string[] = [];
  let existing = dir;
  for (;;) {
    try {
      // Followed through links: a link to a folder is a folder here.
      if (fs.statSync(existing).isDirectory()) break;
      // A file (or a link to one) where a folder is needed: it is what to fix, not the folder asked for.
      return failure("ENOTDIR", existing, `ENOTDIR: not a directory, mkdir '${dir}'`);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // Missing, or under a file further up: looked for above.
      if (code !== "ENOENT" && code !== "ENOTDIR") return error as NodeJS.ErrnoException;
      missing.unshift(existing);
      const parent = path.dirname(existing);
      if (parent === existing) return undefined;
      existing = parent;
    }
  }
  for (const folder of missing) {
    try {
      fs.mkdirSync(folder);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "EEXIST") return error as NodeJS.ErrnoException;
      // There, yet not found above: a link to nothing (a disk not mounted),
      // or made meanwhile by another process.
      const target = readLink(folder);
      if (target !== undefined && !fs.existsSync(folder)) {
        return failure("ENOENT", folder, `ENOENT: no such file or directory, mkdir '${dir}'`, { target });
      }
      if (!isFolder(folder)) return failure("ENOTDIR", folder, `ENOTDIR: not a directory, mkdir '${dir}'`);
    }
  }
  return undefined;
}

function readLink(file: string): string | undefined {
  try {
    return fs.readlinkSync(file);
  } catch {
    return undefined;
  }
}

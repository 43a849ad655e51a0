import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

/** The name createWhole gives the file it writes first: `<file>.<pid>-<8 hex digits>.tmp`. */
const tempName = /\.\d+-[0-9a-f]{8}\.tmp$/;

/**
 * Creates `file` holding `text`, or fails with EEXIST when it exists, and
 * leaves nothing behind when it fails. The text is written to a file of its
 * own first and then linked under the name, so that `file` is never seen
 * empty or cut short: not by another process reading it (which would take
 * a claim being made for one left by a killed start), and not after a
 * write that failed (a full disk), which would leave a short file for every
 * later reader. Where the file system has no hard links, `file` is created
 * and written in two steps, and removed if the write fails.
 */
export function createWhole(file: string, text: string, mode = 0o666): void {
  // Named by tempName.
  const written = `${file}.${process.pid}-${randomBytes(4).toString("hex")}.tmp`;
  try {
    fs.writeFileSync(written, text, { flag: "wx", mode });
    fs.linkSync(written, file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const noHardLinks = (error as NodeJS.ErrnoException).syscall === "link" && (code === "EPERM" || code === "ENOTSUP" || code === "EOPNOTSUPP" || code === "ENOSYS");
    if (!noHardLinks) throw error;
    createInTwoSteps(file, text, mode);
  } finally {
    removeIfThere(written);
  }
}

function createInTwoSteps(file: string, text: string, mode: number): void {
  const fd = fs.openSync(file, "wx", mode);
  try {
    fs.writeFileSync(fd, text);
  } catch (error) {
    // Created by this call (O_EXCL): nobody else's to keep.
    fs.closeSync(fd);
    removeIfThere(file);
    throw error;
  }
  fs.closeSync(fd);
}

/** Removes a file; one already gone is no error. */
export function removeIfThere(file: string): void {
  try {
    fs.unlinkSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}

/**
 * Removes from `dir` the files createWhole wrote first and never removed:
 * those of a process killed between its write and its link (createWhole
 * removes its own otherwise). One younger than `minAgeMs` may be a live
 * call's, which lives a moment: it is left. Best effort: a file that cannot
 * be removed is left for the next start.
 */
export function removeLeftTemporaries(dir: string, minAgeMs = 60_000): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  const before = Date.now() - minAgeMs;
  for (const name of names) {
    if (!tempName.test(name)) continue;
    const file = path.join(dir, name);
    try {
      const stat = fs.lstatSync(file);
      if (stat.isFile() && stat.mtimeMs < before) fs.unlinkSync(file);
    } catch {
      // Gone already, or not ours to remove: left as it is.
    }
  }
}

import fs from "node:fs";
import path from "node:path";

/** Another live process holds the data directory. */
export class DataDirInUseError extends Error {
  override name = "DataDirInUseError";
}

/** Whether a process with this id runs (one of another user counts). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A claim on a data directory. */
export interface DataDirLock {
  /** Gives the directory back: the last claim in this process removes `service.pid`. */
  release(): void;
  /**
   * Why the claim no longer holds (`service.pid` gone or naming another
   * process: the folder deleted under the running service), or undefined
   * while it does. Cheap: one small read.
   */
  lost(): string | undefined;
}

/** Claims this process holds, by pid file: several services in one process (tests) share one. */
const claims = new Map<string, number>();

/**
 * Claims `dir` for this process with a `service.pid` file. Why: the
 * embedded defaults (SQLite, the embedded Azurite's files) serve one
 * process; a second `npm start` in the same folder on another port would
 * share them, each process deciding pushes alone and each Azurite writing
 * the same metadata files. A file left by a process that no longer runs (a
 * crash, a kill -9) is taken over. The same process may claim it again
 * (tests run several services in one process).
 */
export function lockDataDir(dir: string): DataDirLock {
  fs.mkdirSync(dir, { recursive: true });
  // Resolved: the claims of one folder named two ways are one count.
  const file = path.resolve(dir, "service.pid");
  // The pid in the file; undefined when there is no file; "unreadable" when
  // it could not be read for another reason (no file descriptor left, say),
  // which says nothing of who holds the folder.
  const readHolder = (): number | undefined | "unreadable" => {
    try {
      return Number.parseInt(fs.readFileSync(file, "utf8"), 10);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      return code === "ENOENT" || code === "ENOTDIR" ? undefined : "unreadable";
    }
  };
  const holderOf = (): number | undefined => {
    const holder = readHolder();
    return holder === "unreadable" ? undefined : holder;
  };
  // Written unless this process holds it already (and it is still there).
  for (let attempt = 0; claims.get(file) === undefined || holderOf() !== process.pid; attempt++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST" || attempt > 0) throw error;
      const holder = readHolder();
      if (holder === process.pid) break;
      // Whose it is cannot be told: not taken over, which could be a live process's.
      if (holder === "unreadable") {
        throw new DataDirInUseError(`DATA_DIR ${dir} may be in use: ${file} exists but cannot be read; check it (its owner, its permissions), and delete it if no service runs there.`);
      }
      if (holder !== undefined && Number.isInteger(holder) && holder > 0 && alive(holder)) {
        throw new DataDirInUseError(
          `DATA_DIR ${dir} is in use by another process (pid ${holder}): stop it, or give this one its own DATA_DIR ` +
            `(the embedded SQLite and Azurite serve one process; for more, use MySQL and Azure). If no such process runs, delete ${file}.`,
        );
      }
      fs.rmSync(file, { force: true });
    }
  }
  claims.set(file, (claims.get(file) ?? 0) + 1);
  let released = false;
  return {
    release: () => {
      if (released) return;
      released = true;
      const left = (claims.get(file) ?? 1) - 1;
      if (left > 0) {
        claims.set(file, left);
        return;
      }
      claims.delete(file);
      if (holderOf() === process.pid) fs.rmSync(file, { force: true });
    },
    lost: () => {
      if (released) return undefined;
      const holder = readHolder();
      if (holder === process.pid || holder === "unreadable") return undefined;
      return holder === undefined
        ? `DATA_DIR ${dir} was deleted (its ${path.basename(file)} is gone) while the service ran: the database and packages it held are gone, and what is written now would be lost; start the service again (npm start) to begin with an empty one`
        : `DATA_DIR ${dir} was taken over by process ${holder} while the service ran: two services must not share it; stop the other one, or give each its own DATA_DIR`;
    },
  };
}

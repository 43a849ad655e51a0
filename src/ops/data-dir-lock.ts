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

/**
 * Claims `dir` for this process with a `service.pid` file, and returns how
 * to give it back. Why: the embedded defaults (SQLite, the embedded
 * Azurite's files) serve one process; a second `npm start` in the same
 * folder on another port would share them, each process deciding pushes
 * alone and each Azurite writing the same metadata files. A file left by
 * a process that no longer runs (a crash, a kill -9) is taken over. The
 * same process may claim it again (tests run several services in one
 * process).
 */
export function lockDataDir(dir: string): () => void {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "service.pid");
  for (let attempt = 0; ; attempt++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST" || attempt > 0) throw error;
      const holder = Number.parseInt(fs.readFileSync(file, "utf8"), 10);
      if (holder === process.pid) return () => undefined;
      if (Number.isInteger(holder) && holder > 0 && alive(holder)) {
        throw new DataDirInUseError(
          `DATA_DIR ${dir} is in use by another process (pid ${holder}): stop it, or give this one its own DATA_DIR ` +
            `(the embedded SQLite and Azurite serve one process; for more, use MySQL and Azure). If no such process runs, delete ${file}.`,
        );
      }
      fs.rmSync(file, { force: true });
    }
  }
  return () => {
    try {
      if (Number.parseInt(fs.readFileSync(file, "utf8"), 10) === process.pid) fs.rmSync(file, { force: true });
    } catch {
      // Already gone.
    }
  };
}

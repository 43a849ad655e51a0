import fs from "node:fs";
import path from "node:path";
import { createWhole, removeIfThere, removeLeftTemporaries } from "./create-whole.js";
import { makeDirectory } from "./make-directory.js";

/** Another live process holds the data directory. */
export class DataDirInUseError extends Error {
  override name = "DataDirInUseError";
}

/**
 * The data directory's `service.pid` is not one this service can judge or
 * replace: not a plain file, or a stale one this user may not delete.
 */
export class ServicePidError extends Error {
  override name = "ServicePidError";
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
 * What `service.pid` says of the process that wrote it: its pid and, on
 * Linux, what tells that process from a later one given the same pid (after
 * a crash, a reboot, or in another pid namespace, where the pid of a
 * container's service is that of the host's init). A file with only a pid
 * (written by an earlier version, or where there is no /proc) is judged by
 * the pid alone.
 */
interface Holder {
  readonly pid: number;
  /** When it started, in clock ticks after boot: field 22 of /proc/<pid>/stat. */
  readonly start?: string;
  /** The boot it started in: /proc/sys/kernel/random/boot_id. */
  readonly boot?: string;
  /** The pid namespace its pid counts in, as /proc/<pid>/ns/pid links to it. */
  readonly pidNamespace?: string;
}

function readOrUndefined(read: () => string): string | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/** Field 22 of /proc/<entry>/stat, or undefined where it cannot be read. */
function startOf(entry: string): string | undefined {
  const stat = readOrUndefined(() => fs.readFileSync(`/proc/${entry}/stat`, "utf8"));
  // The second field, the command's name in parentheses, may itself hold
  // spaces and ")": the fields are counted from after its last ")", where
  // the third one is.
  const close = stat?.lastIndexOf(")") ?? -1;
  if (stat === undefined || close < 0) return undefined;
  const start = stat.slice(close + 1).trim().split(/\s+/)[22 - 3];
  return start !== undefined && /^\d+$/.test(start) ? start : undefined;
}

const pidNamespaceOf = (entry: string) => readOrUndefined(() => fs.readlinkSync(`/proc/${entry}/ns/pid`));

let own: Holder | undefined;
/** This process as its `service.pid` describes it. */
function ownHolder(): Holder {
  if (own !== undefined) return own;
  const start = startOf("self");
  const boot = readOrUndefined(() => fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()) || undefined;
  const pidNamespace = pidNamespaceOf("self");
  own = { pid: process.pid, ...(start ? { start } : {}), ...(boot ? { boot } : {}), ...(pidNamespace ? { pidNamespace } : {}) };
  return own;
}

/** The pid on the first line, as other tools read a pid file; what tells the process apart on the lines after it. */
function format(holder: Holder): string {
  let text = `${holder.pid}\n`;
  if (holder.start !== undefined) text += `start=${holder.start}\n`;
  if (holder.boot !== undefined) text += `boot=${holder.boot}\n`;
  if (holder.pidNamespace !== undefined) text += `pidns=${holder.pidNamespace}\n`;
  return text;
}

function parse(text: string): Holder {
  const [first = "", ...rest] = text.split("\n");
  const fields = new Map<string, string>();
  for (const line of rest) {
    const field = /^(?<name>\w+)=(?<value>.+)$/.exec(line.trim())?.groups;
    if (field?.["name"] !== undefined && field["value"] !== undefined) fields.set(field["name"], field["value"]);
  }
  const start = fields.get("start");
  const boot = fields.get("boot");
  const pidNamespace = fields.get("pidns");
  return { pid: Number.parseInt(first, 10), ...(start ? { start } : {}), ...(boot ? { boot } : {}), ...(pidNamespace ? { pidNamespace } : {}) };
}

/** Whether two descriptions may be of one process: what one of them does not say is not held against it. */
function same(a: Holder, b: Holder): boolean {
  const agree = (x: string | undefined, y: string | undefined) => x === undefined || y === undefined || x === y;
  return a.pid === b.pid && agree(a.start, b.start) && agree(a.boot, b.boot) && agree(a.pidNamespace, b.pidNamespace);
}

/** Whether its pid counts in another pid namespace than this process's. */
function elsewhere(holder: Holder): boolean {
  const here = ownHolder().pidNamespace;
  return holder.pidNamespace !== undefined && here !== undefined && holder.pidNamespace !== here;
}

/**
 * Whether the process that wrote `service.pid` may still run. Where it
 * cannot be told (another user's hidden /proc entry), it may: a live
 * service's folder taken over is worse than a start refused.
 */
function mayRun(holder: Holder): boolean {
  if (!Number.isInteger(holder.pid) || holder.pid <= 0) return false;
  const here = ownHolder();
  // Written before this boot: no process of then runs now.
  if (holder.boot !== undefined && here.boot !== undefined && holder.boot !== here.boot) return false;
  if (holder.pidNamespace !== undefined && elsewhere(holder)) {
    // Its pid counts in another pid namespace (a container's, or the host's
    // seen from one): here it would name another process. It is looked for
    // among the processes this one sees, by its start and its namespace; a
    // namespace that has ended (a container stopped) shows none.
    return holder.start === undefined || runsIn(holder.pidNamespace, holder.start);
  }
  if (!alive(holder.pid)) return false;
  // /proc counts pids in this process's namespace (not so when a process is
  // put in a new one without a /proc of its own): else its entries name others.
  if (holder.start === undefined || readOrUndefined(() => fs.readlinkSync("/proc/self")) !== String(process.pid)) return true;
  const start = startOf(String(holder.pid));
  return start === undefined || start === holder.start;
}

/** Whether a process that started at `start` runs in pid namespace `namespace`, among those this one sees. */
function runsIn(namespace: string, start: string): boolean {
  let entries: string[];
  try {
    entries = fs.readdirSync("/proc");
  } catch {
    return true;
  }
  // By start first, which anyone may read: the namespace of another user's process may be hidden, and is then taken to match.
  return entries.some((entry) => /^\d+$/.test(entry) && startOf(entry) === start && (pidNamespaceOf(entry) ?? namespace) === namespace);
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

/**
 * How long an empty `service.pid` (or takeover file) is taken for one
 * being made by a start of an earlier version, which created the file and
 * then wrote it: past this age, and once watched for this long, it is one
 * left by such a start killed between the two steps. This version never
 * makes one (see createWhole).
 */
const emptyClaimMs = 1_000;

/** Whether an empty file is one still being written: new, and not yet watched for long (when watched). */
function beingWritten(file: string, watchedSince?: number): boolean {
  let age: number;
  try {
    age = Date.now() - fs.statSync(file).mtimeMs;
  } catch {
    return false;
  }
  // A clock behind the file system's (a network mount) makes a new file look
  // older, or younger than nothing: the time watched bounds the wait.
  return age < emptyClaimMs && (watchedSince === undefined || Date.now() - watchedSince < emptyClaimMs);
}

/**
 * What `file` is when it is not a plain file (a link, a folder, a pipe a
 * read would wait on forever), said for a message; undefined when it is one
 * or is not there.
 */
function notPlainFile(file: string): string | undefined {
  let stats: fs.Stats;
  try {
    stats = fs.lstatSync(file);
  } catch {
    return undefined;
  }
  if (stats.isFile()) return undefined;
  if (stats.isSymbolicLink()) {
    const target = readOrUndefined(() => fs.readlinkSync(file));
    return `a symbolic link${target === undefined ? "" : ` to ${target}`}${fs.existsSync(file) ? "" : ", which does not exist"}`;
  }
  return stats.isDirectory() ? "a folder" : "not a regular file";
}

/**
 * Removes a claim (or takeover file) judged stale. One this user may not
 * delete (another user's, in a folder where only a file's owner may delete
 * it) is reported as such: no start by this user can go on.
 */
function removeStale(file: string, seen: string): void {
  try {
    removeIfThere(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "EPERM" && code !== "EACCES") throw error;
    const pid = parse(seen).pid;
    throw new ServicePidError(
      `DATA_DIR ${path.dirname(file)} holds a stale ${path.basename(file)} (${Number.isInteger(pid) ? `pid ${pid}, which no longer runs` : "empty, left by a start that was killed"}), ` +
        `which this user may not delete (${code}): it belongs to another user, in a folder where only a file's owner may delete it (the sticky bit, as on /tmp), or this user may not write the folder. ` +
        `That user (or root) must delete ${file}; or give this service a DATA_DIR of its own.`,
      { cause: error },
    );
  }
}

const unreadable = Symbol("unreadable");
/** Waited on, never woken: a short pause in code that is synchronous. */
const pause = new Int32Array(new SharedArrayBuffer(4));

/** Claims this process holds, by pid file: several services in one process (tests) share one. */
const claims = new Map<string, number>();

/**
 * Removes every `service.pid` this process still holds. Why: an exit that
 * does not go through release (a second Ctrl-C's exit at once,
 * `process.exit` after a fatal error) would otherwise leave it behind,
 * and the next start on another pid namespace (a container restarted)
 * would be refused or have to judge it. Synchronous, as an exit's
 * listeners must be; one listener for every claim, so that many claims in
 * one process (tests) do not add one each.
 */
let listeningForExit = false;
function releaseAllOnExit(): void {
  for (const file of claims.keys()) {
    try {
      const text = fs.readFileSync(file, "utf8");
      if (same(parse(text), ownHolder())) removeIfThere(file);
    } catch {
      // Gone already, or unreadable: nothing this exit can do about it.
    }
  }
  claims.clear();
}

/**
 * Claims `dir` for this process with a `service.pid` file. Why: the
 * embedded defaults (SQLite, the embedded Azurite's files) serve one
 * process; a second `npm start` in the same folder on another port would
 * share them, each process deciding pushes alone and each Azurite writing
 * the same metadata files. A file left by a process that no longer runs (a
 * crash, a kill -9) is taken over, also when its pid now names another
 * process (reused, or pid 1 of a container seen from the host). The same
 * process may claim it again (tests run several services in one process).
 */
export function lockDataDir(dir: string): DataDirLock {
  makeDirectory(dir);
  // Resolved: the claims of one folder named two ways are one count.
  const file = path.resolve(dir, "service.pid");
  // What the file says; undefined when there is no file; unreadable when
  // it could not be read for another reason (no file descriptor left, say),
  // which says nothing of who holds the folder.
  const readText = (): string | undefined | typeof unreadable => {
    try {
      return fs.readFileSync(file, "utf8");
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      return code === "ENOENT" || code === "ENOTDIR" ? undefined : unreadable;
    }
  };
  const readHolder = (): Holder | undefined | typeof unreadable => {
    const text = readText();
    return typeof text === "string" ? parse(text) : text;
  };
  const mine = (holder: Holder | undefined | typeof unreadable) => typeof holder === "object" && same(holder, ownHolder());
  // When an empty file was first seen: see beingWritten.
  let emptySince: number | undefined;
  // Written unless this process holds it already (and it is still there).
  for (let attempt = 0; claims.get(file) === undefined || !mine(readHolder()); attempt++) {
    try {
      createWhole(file, format(ownHolder()));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      // Nothing a service writes: a link (one to nothing reads as no file at
      // all, which would be retried until the bound below), a folder, a pipe.
      const what = notPlainFile(file);
      if (what !== undefined) {
        throw new ServicePidError(`DATA_DIR ${dir} cannot be claimed: ${file} is ${what}, not the plain file a service writes there. If no service runs on this DATA_DIR, delete ${file}; the start then writes its own.`);
      }
      // Some 2 s of another start taking the file over: one stopped while it
      // held its takeover file.
      if (attempt > 200) {
        throw new DataDirInUseError(`DATA_DIR ${dir} is being taken over by another start, or was by one that was killed: if no other start is under way, delete ${file}.takeover.`);
      }
      const text = readText();
      if (text === undefined) continue;
      // Whose it is cannot be told: not taken over, which could be a live process's.
      if (text === unreadable) {
        throw new DataDirInUseError(`DATA_DIR ${dir} may be in use: ${file} exists but cannot be read; check it (its owner, its permissions), and delete it if no service runs there.`);
      }
      // Created but not yet written: a claim an earlier version's start is
      // making, or one left by such a start killed between the two steps,
      // told apart by age. Never a claim of this version, made whole.
      if (text === "") {
        emptySince ??= Date.now();
        if (beingWritten(file, emptySince)) {
          Atomics.wait(pause, 0, 0, 10);
          continue;
        }
      } else {
        emptySince = undefined;
      }
      const holder = parse(text);
      if (mine(holder)) break;
      if (mayRun(holder)) {
        throw new DataDirInUseError(
          `DATA_DIR ${dir} is in use by another process (pid ${holder.pid}${elsewhere(holder) ? " in another pid namespace: a container's" : ""}): stop it, or give this one its own DATA_DIR ` +
            `(the embedded SQLite and Azurite serve one process; for more, use MySQL and Azure). If no such process runs, delete ${file}.`,
        );
      }
      // Another start takes it over just now: a moment, then the file says which one.
      if (!takeOver(file, text)) Atomics.wait(pause, 0, 0, 10);
    }
  }
  claims.set(file, (claims.get(file) ?? 0) + 1);
  // Held now: what a start killed while it wrote a claim or a secret here left behind.
  removeLeftTemporaries(path.dirname(file));
  if (!listeningForExit) {
    listeningForExit = true;
    process.on("exit", releaseAllOnExit);
  }
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
      if (mine(readHolder())) removeIfThere(file);
    },
    lost: () => {
      if (released) return undefined;
      const holder = readHolder();
      if (holder === unreadable || mine(holder)) return undefined;
      return holder === undefined
        ? `DATA_DIR ${dir} was deleted (its ${path.basename(file)} is gone) while the service ran: the database and packages it held are gone, and what is written now would be lost; start the service again (npm start) to begin with an empty one`
        : `DATA_DIR ${dir} was taken over by process ${holder.pid} while the service ran: two services must not share it; stop the other one, or give each its own DATA_DIR`;
    },
  };
}

/**
 * Removes `service.pid` if it still says `seen`, judged stale. Two starts
 * may judge the same file stale: the first removes it and writes its own
 * claim, and the second, removing blindly, would remove that claim and both
 * would run. So it is removed only under a second file, `service.pid.takeover`,
 * that one start at a time holds (written with O_EXCL too), and only if
 * unchanged: a claim written since is never the file judged stale, which
 * named a process that had ended. False when another start holds the
 * takeover: it is under way, and the caller looks again.
 */
function takeOver(file: string, seen: string): boolean {
  const guard = `${file}.takeover`;
  try {
    createWhole(guard, format(ownHolder()));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // One left by a start killed between its writing and its removal below
    // is judged as `service.pid` is (removing it is a race of its own, but
    // only when that rare death meets two starts at once); an empty one is
    // an earlier version's, being made while it is new.
    const text = readOrUndefined(() => fs.readFileSync(guard, "utf8"));
    if (text !== undefined && (text === "" ? !beingWritten(guard) : !mayRun(parse(text)))) removeStale(guard, text);
    return false;
  }
  try {
    if (readOrUndefined(() => fs.readFileSync(file, "utf8")) === seen) removeStale(file, seen);
  } finally {
    removeIfThere(guard);
  }
  return true;
}

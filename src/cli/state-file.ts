import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { CliError } from "./cli-error.js";

/** The state file's name: in a pushed directory, or the current directory for file pushes and downloads. Never packed. */
export const stateFileName = ".entity-versions.json";

/** What the CLI remembers about one entity on one service: the base of the next push. */
export interface BaseRecord {
  readonly version_id: string;
  readonly version: string;
  readonly source_hash: string;
  /** How this folder came to build on it. */
  readonly via: "push" | "download";
  readonly recorded_at: string;
}

/**
 * The file's shape: bases by service URL, then by entity id. Keyed by
 * service too, so one folder pushed to a staging and a production service
 * keeps a base for each instead of sending one service's version id to the
 * other.
 */
interface StateDocument {
  format: 1;
  services: Record<string, Record<string, BaseRecord>>;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

/** An object each of whose values passes `each`. */
const isRecordOf = (value: unknown, each: (item: unknown) => boolean): boolean => isObject(value) && Object.values(value).every(each);

/** What a push reads of a record: an entry edited by hand to anything else would be sent as the base, or crash. */
const isBaseRecord = (value: unknown): boolean => isObject(value) && typeof value["version_id"] === "string";

function read(file: string): StateDocument {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { format: 1, services: {} };
    throw error;
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    doc = undefined;
  }
  const services = (doc as { services?: unknown } | undefined)?.services;
  if (typeof doc !== "object" || doc === null || (doc as { format?: unknown }).format !== 1 || !isRecordOf(services, (entities) => isRecordOf(entities, isBaseRecord))) {
    throw new CliError(
      `${file} is not a state file this CLI wrote: delete it (the next push then needs --base) or fix it.`,
      "STATE_FILE_INVALID",
    );
  }
  return doc as StateDocument;
}

/** The base recorded in `dir` for this entity on this service, if any. */
export function readBase(dir: string, service: string, entity: string): BaseRecord | undefined {
  return read(path.join(dir, stateFileName)).services[service]?.[entity];
}

/**
 * The bases recorded in `dir` for this entity under other service URLs: the
 * same service under another name (an IP address, an internal host name)
 * finds no record under the URL it is called by, and is told of these.
 */
export function basesElsewhere(dir: string, service: string, entity: string): Array<{ service: string; base: BaseRecord }> {
  const { services } = read(path.join(dir, stateFileName));
  return Object.entries(services).flatMap(([url, entities]) => (url !== service && entities[entity] !== undefined ? [{ service: url, base: entities[entity]! }] : []));
}

/** The lock file's name, beside the state file (never packed either). */
export const stateLockName = `${stateFileName}.lock`;
/** How long a command waits for another to finish writing the state file. */
const lockWaitMs = 5_000;
/** A lock older than this was left by a command that was killed: writing takes milliseconds. */
const staleLockMs = 15_000;

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Removes a lock judged stale, without removing one another command has
 * just made in its place: it is first renamed aside (one rename of it
 * succeeds), then looked at again, and put back if it turns out fresh.
 */
function takeOverStale(lock: string): void {
  const aside = `${lock}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    fs.renameSync(lock, aside);
  } catch {
    return; // another command took it over first
  }
  let fresh = false;
  try {
    fresh = Date.now() - fs.statSync(aside).mtimeMs <= staleLockMs;
    // Put back unless a lock was made meanwhile (then that one rules).
    if (fresh) fs.linkSync(aside, lock);
  } catch {
    // EEXIST: another lock stands now.
  } finally {
    fs.rmSync(aside, { force: true });
  }
}

/**
 * Runs `work` holding the state file's lock: a file created exclusively
 * beside it. Without it, two commands in one folder (parallel file pushes
 * of a monorepo's entities from one CI directory) each read the file, add
 * their entity and rename theirs over the other's, and one base is lost.
 */
function withLock<T>(dir: string, work: () => T): T {
  const lock = path.join(dir, stateLockName);
  const giveUpAt = Date.now() + lockWaitMs;
  for (;;) {
    try {
      fs.closeSync(fs.openSync(lock, "wx"));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    let age: number | undefined;
    try {
      age = Date.now() - fs.statSync(lock).mtimeMs;
    } catch {
      continue; // released meanwhile
    }
    if (age > staleLockMs) {
      takeOverStale(lock);
      continue;
    }
    if (Date.now() >= giveUpAt) {
      throw new CliError(
        `${lock} is held by another entity-versions command writing this folder's state; wait for it to end, or delete the file if none runs.`,
        "STATE_FILE_LOCKED",
      );
    }
    // A synchronous wait: the writers are other processes, and recordBase is synchronous.
    Atomics.wait(pause, 0, 0, 10 + Math.floor(Math.random() * 20));
  }
  try {
    return work();
  } finally {
    fs.rmSync(lock, { force: true });
  }
}

/**
 * Records the base for this entity on this service in `dir`, keeping every
 * other record, under the state file's lock. Written to a temporary file
 * and renamed over the old one, so an interrupted CLI leaves the previous
 * file or the new one, never half of one.
 */
export function recordBase(dir: string, service: string, entity: string, record: BaseRecord): string {
  const file = path.join(dir, stateFileName);
  return withLock(dir, () => {
    const doc = read(file);
    doc.services[service] = { ...doc.services[service], [entity]: record };
    const temporary = path.join(dir, `${stateFileName}.${randomBytes(6).toString("hex")}.tmp`);
    try {
      fs.writeFileSync(temporary, `${JSON.stringify(doc, null, 2)}\n`);
      fs.renameSync(temporary, file);
    } catch (error) {
      fs.rmSync(temporary, { force: true });
      throw error;
    }
    return file;
  });
}

/** What came of recording a base: the state file's path, and why it could not be written, if it could not. */
export interface RecordedBase {
  readonly file: string;
  readonly problem?: string;
}

/**
 * Records the base as recordBase does, or says why it could not. For use
 * after the work itself succeeded (a version pushed, a file downloaded): a
 * folder the CLI may not write to (a read-only mount, someone else's state
 * file) must not turn that success into a failure, which a rerun could not
 * mend either.
 */
export function tryRecordBase(dir: string, service: string, entity: string, record: BaseRecord): RecordedBase {
  const file = path.join(dir, stateFileName);
  try {
    return { file: recordBase(dir, service, entity, record) };
  } catch (error) {
    const problem = error instanceof CliError ? error.message : `${(error as NodeJS.ErrnoException).code ?? "error"}: ${(error as Error).message}`;
    return { file, problem };
  }
}

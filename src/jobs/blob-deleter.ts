import { type BlobArea, uploadPaths } from "../blob/blob-paths.js";
import type { BlobStore } from "../blob/blob-store.js";
import type { Clock } from "../clock.js";
import type { Metrics } from "../ops/metrics.js";
import type { UploadStore } from "../store/upload-store.js";

/** The part of a pino logger the deleter uses. */
export interface DeleterLogger {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

const leaseMs = 60_000;
const areas: readonly BlobArea[] = ["staging", "final", "legacy"];
const maxBackoffMs = 5 * 60_000;
/** Uploads whose blobs deleteSoon deletes at once, at most, in one process. */
const maxImmediate = 16;

/**
 * Deletes the blobs of uploads marked "deleting" (by DeleteVersion, in the
 * same transaction that removed the record) and then forgets the upload.
 * DeleteVersion tries at once; whatever fails stays marked and is retried
 * with backoff by the periodic pass, on whichever replica gets to it first,
 * until the blob store takes it.
 */
export class BlobDeleter {
  readonly #uploads: UploadStore;
  readonly #blobs: BlobStore;
  readonly #clock: Clock;
  readonly #log: DeleterLogger;
  readonly #metrics: Metrics | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** Deletions deleteSoon started that are still running: stop() waits for them. */
  readonly #immediate = new Set<Promise<boolean>>();
  #running: Promise<unknown> = Promise.resolve();
  /** Set by stop(): a pass under way takes no further row, so a slow blob store holds a stop up for one row at most. */
  #stopping = false;

  constructor(uploads: UploadStore, blobs: BlobStore, clock: Clock, log: DeleterLogger, metrics?: Metrics) {
    this.#uploads = uploads;
    this.#blobs = blobs;
    this.#clock = clock;
    this.#log = log;
    this.#metrics = metrics;
  }

  async #deleteBlobs(entityId: string, uploadId: string, versionId: string | undefined): Promise<void> {
    // Every place an upload's blobs can be: staged, its version's own copy
    // (under the version's id; under the upload's before that), or in the
    // layout of versions confirmed before staging existed.
    const paths = areas.flatMap((area) => Object.values(uploadPaths(entityId, uploadId, area)));
    if (versionId !== undefined) paths.push(...Object.values(uploadPaths(entityId, versionId, "final")));
    try {
      await Promise.all(paths.map((path) => this.#blobs.deleteIfExists(path)));
      await this.#uploads.finish(entityId, uploadId);
    } catch (error) {
      this.#metrics?.blobDeletions.inc({ result: "error" });
      throw error;
    }
    this.#metrics?.blobDeletions.inc({ result: "ok" });
  }

  /**
   * Deletes blobs nothing refers to any more (a confirmed upload's staged
   * copy, a copy made by a confirm that did not create its version), best
   * effort: what fails is left to the orphan sweeper, which deletes the
   * staged blobs of confirmed uploads and copies no version owns.
   */
  async discard(paths: readonly string[]): Promise<void> {
    await Promise.all(
      paths.map((path) =>
        this.#blobs.deleteIfExists(path).catch((error: unknown) => this.#log.warn({ err: error, path }, "could not delete a blob no version uses; the sweeper will")),
      ),
    );
  }

  /**
   * Starts deleting one upload's blobs in the background, without holding
   * up the answer of the call that queued them, unless `maxImmediate`
   * such deletions are already running: then (a client deleting versions
   * faster than the blob store deletes blobs) it is left to the periodic
   * pass, so that deletions never pile up in the process or on the store.
   * Once stop() is called none starts: stop() has already taken the
   * deletions it waits for, and one started after would record its end in
   * a closed database (a call still finishing during the drain queues its
   * deletion; the next pass, here or on another replica, takes it).
   */
  deleteSoon(entityId: string, uploadId: string, versionId?: string): void {
    if (this.#stopping || this.#immediate.size >= maxImmediate) return;
    const deletion = this.deleteNow(entityId, uploadId, versionId);
    this.#immediate.add(deletion);
    void deletion.finally(() => this.#immediate.delete(deletion));
  }

  /** Deletes one upload's blobs now; on failure it stays queued for the periodic pass. */
  async deleteNow(entityId: string, uploadId: string, versionId?: string): Promise<boolean> {
    try {
      await this.#deleteBlobs(entityId, uploadId, versionId);
      return true;
    } catch (error) {
      this.#log.warn({ err: error, entityId, uploadId }, "blob deletion failed; it will be retried");
      return false;
    }
  }

  /**
   * One pass over the due deletions; returns how many finished. A pass
   * logs its first failure and then one line counting the rest: with the
   * blob store down, every due row fails alike, and a line (and a stack)
   * each would be hundreds of thousands a day.
   */
  async runOnce(limit = 100): Promise<number> {
    let done = 0;
    let failed = 0;
    let last: { error: unknown; entityId: string; uploadId: string } | undefined;
    for (const due of await this.#uploads.dueDeletions(this.#clock.now(), limit)) {
      if (this.#stopping) break;
      // Leased from its own claim: a long pass must not hand out leases already run out.
      if (!(await this.#uploads.claim(due, new Date(this.#clock.now().getTime() + leaseMs)))) continue;
      try {
        await this.#deleteBlobs(due.entityId, due.id, due.versionId);
        done++;
      } catch (error) {
        const backoff = Math.min(maxBackoffMs, 1_000 * 2 ** due.attempts);
        if (failed++ === 0) this.#log.warn({ err: error, entityId: due.entityId, uploadId: due.id, attempts: due.attempts + 1 }, "blob deletion failed; retrying later");
        else last = { error, entityId: due.entityId, uploadId: due.id };
        await this.#uploads.retryAt(due.entityId, due.id, new Date(this.#clock.now().getTime() + backoff)).catch(() => undefined);
      }
    }
    if (last !== undefined) {
      this.#log.warn(
        { failed, lastError: last.error instanceof Error ? last.error.message : String(last.error), entityId: last.entityId, uploadId: last.uploadId },
        `${failed} blob deletions failed in this pass; each is retried later, with backoff`,
      );
    }
    return done;
  }

  /** Runs a pass every `intervalMs` until stop(). */
  start(intervalMs: number): void {
    const tick = () => {
      this.#running = this.runOnce()
        .catch((error: unknown) => this.#log.error({ err: error }, "blob deletion pass failed"))
        .finally(() => {
          if (this.#timer !== undefined) this.#timer = setTimeout(tick, intervalMs).unref();
        });
    };
    this.#timer = setTimeout(tick, intervalMs).unref();
  }

  /**
   * Stops the periodic pass and waits for the row a pass under way is on,
   * and for the deletions deleteSoon started: they finish before the
   * database they record their end in closes. Rows left are the next
   * start's (or another replica's).
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await Promise.all([this.#running, ...this.#immediate]);
  }
}

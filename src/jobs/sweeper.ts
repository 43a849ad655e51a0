import { areaPrefixes, parseUploadPath, type ParsedUploadPath } from "../blob/blob-paths.js";
import type { BlobStore } from "../blob/blob-store.js";
import type { Clock } from "../clock.js";
import { scopedKey, type UploadStore } from "../store/upload-store.js";
import type { BlobDeleter, DeleterLogger } from "./blob-deleter.js";

/** How many kept packages are named in the log one by one; past it, only counted. */
const maxKeptNamed = 10_000;

/** How many listed blobs of ours are looked up in the database together. */
const sweepBatchMax = 500;

/** A listed blob of ours, past the grace period. */
interface Listed {
  readonly name: string;
  readonly path: ParsedUploadPath;
}

/** What one sweep did. */
export interface SweepResult {
  /** Uploads issued but never confirmed within the grace period, now queued for deletion. */
  readonly abandonedUploads: number;
  /** Blobs older than the grace period that no upload or version owns, deleted. */
  readonly strayBlobs: number;
  /** Events older than the retention period, deleted (0 when events are kept for good). */
  readonly prunedEvents: number;
  /** Packages under `versions/` that no version records, left in place because the options say keep them. */
  readonly keptPackages: number;
}

/** The event log, as far as the sweeper prunes it. */
export interface EventPruning {
  /** Deletes events older than `cutoff`, looking at up to `limit`; returns how many it deleted. */
  pruneBefore(cutoff: Date, limit: number): Promise<number>;
}

/** How the sweeper runs. */
export interface SweeperOptions {
  /** How long an upload may wait for its confirm before it is swept. */
  readonly graceMs: number;
  readonly intervalMs: number;
  /** Events older than this are deleted; undefined: kept for as long as their entity. */
  readonly eventRetentionMs?: number | undefined;
  /**
   * Whether a package under `versions/` that no version records is deleted
   * (true) or kept and logged (false). Kept, they are what a database
   * restored from a backup older than its container does not know: the
   * operator who restored it wants them, to push them again.
   */
  readonly deleteUnrecordedPackages?: boolean | undefined;
  /** After each sweep, with what it did; with the error that ended it part-way, if one did. */
  readonly onSweep?: (result: SweepResult, error?: unknown) => void;
}

/**
 * Deletes orphan uploads: blobs that were uploaded (or never uploaded) under
 * an upload URL that was never confirmed, and the staged copies of
 * confirmed ones. It lists and deletes only under the service's own
 * prefixes (`uploads/`, `versions/`). It reconciles the container
 * against the records rather than trusting URL expiry, since an upload that
 * started before its URL expired can land after: a blob is swept only when
 * it is older than the grace period AND its upload record is still
 * "issued" (then marked "deleting" by a conditional update that loses to any
 * confirm) or missing. Blobs of confirmed uploads are never touched. Every
 * step is idempotent, so replicas may sweep at the same time. With an event
 * retention set, it also deletes the events older than that.
 */
export class OrphanSweeper {
  readonly #uploads: UploadStore;
  readonly #blobs: BlobStore;
  readonly #deleter: BlobDeleter;
  readonly #clock: Clock;
  readonly #log: DeleterLogger;
  readonly #options: SweeperOptions;
  readonly #events: EventPruning | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<unknown> = Promise.resolve();
  #stopping = false;
  /** Kept packages already named in the log: each once per process, not once per sweep. */
  readonly #keptNamed = new Set<string>();

  constructor(uploads: UploadStore, blobs: BlobStore, deleter: BlobDeleter, clock: Clock, log: DeleterLogger, options: SweeperOptions, events?: EventPruning) {
    this.#uploads = uploads;
    this.#blobs = blobs;
    this.#deleter = deleter;
    this.#clock = clock;
    this.#log = log;
    this.#options = options;
    this.#events = events;
  }

  /**
   * One sweep: abandoned uploads by record, old events (the database
   * only, so a blob store that is down does not hold them up), then stray
   * blobs by listing, then the deletions. Each long loop stops between
   * batches once stop() is called: a first sweep over a large log or
   * container must not hold up a shutdown (the next sweep goes on). A
   * stray blob the store will not delete is logged and passed over: every
   * sweep lists from the start, so one such blob must not stop the sweeps
   * of every blob after it. What a sweep did is reported (onSweep) also
   * when it fails part-way.
   */
  async runOnce(): Promise<SweepResult> {
    const now = this.#clock.now();
    const cutoff = new Date(now.getTime() - this.#options.graceMs);
    const done = { abandonedUploads: 0, strayBlobs: 0, prunedEvents: 0, keptPackages: 0 };
    const keepUnrecorded = this.#options.deleteUnrecordedPackages === false;
    /** Kept packages this sweep that the log has not named (past maxKeptNamed). */
    let keptUnnamed = 0;
    try {
      for (let marked = -1; marked !== 0 && !this.#stopping; ) {
        marked = await this.#uploads.abandonIssuedBefore(cutoff, now, 500);
        done.abandonedUploads += marked;
      }
      const retentionMs = this.#options.eventRetentionMs;
      if (this.#events !== undefined && retentionMs !== undefined) {
        const eventCutoff = new Date(now.getTime() - retentionMs);
        for (let deleted = -1; deleted !== 0 && !this.#stopping; ) {
          deleted = await this.#events.pruneBefore(eventCutoff, 1000);
          done.prunedEvents += deleted;
        }
      }
      /**
       * Sweeps one batch of listed blobs: their upload states in one
       * statement, then, for the version folders with no upload record,
       * their versions in one more. Two statements a batch, not two a
       * blob: every replica lists every blob every interval, whatever
       * there is to sweep.
       */
      const sweepBatch = async (batch: readonly Listed[]) => {
        const states = await this.#uploads.states(batch.map(({ path }) => ({ entityId: path.entityId, id: path.uploadId })));
        const unclaimedFinal = batch.filter(({ path }) => path.area === "final" && !states.has(scopedKey(path.entityId, path.uploadId)));
        const versions = await this.#uploads.versionsExisting(unclaimedFinal.map(({ path }) => ({ entityId: path.entityId, id: path.uploadId })));
        for (const { name, path } of batch) {
          if (this.#stopping) break;
          const key = scopedKey(path.entityId, path.uploadId);
          const state = states.get(key);
          // No record: nothing can refer to it, unless it is a version's own
          // copy, which lives under the version's id. A confirmed upload's
          // staged blob: its version serves its own copy. "issued" past the
          // cutoff was marked above; "deleting" belongs to the deleter.
          const stray = state === undefined ? path.area !== "final" || !versions.has(key) : state === "confirmed" && path.area === "staging";
          if (!stray) continue;
          if (keepUnrecorded && path.area === "final") {
            done.keptPackages++;
            if (this.#keptNamed.has(name)) continue;
            if (this.#keptNamed.size < maxKeptNamed) {
              this.#keptNamed.add(name);
              this.#log.warn({ path: name, entity_id: path.entityId }, "kept a package no version records, as SWEEP_UNRECORDED_PACKAGES=off says (README, Backups)");
            } else keptUnnamed++;
            continue;
          }
          try {
            // Gone already (the deleter finished its upload since the
            // listing, or another replica swept it): not a stray we removed.
            if (await this.#blobs.deleteIfExists(name)) {
              done.strayBlobs++;
              // A version's copy with no version: a confirm that failed after
              // copying, or, in numbers, a database restored from a backup
              // older than its container, whose newer packages these are
              // (README, Backups). Said one by one, so that a restore gone
              // wrong is seen in the log, not only in a counter.
              if (path.area === "final") this.#log.warn({ path: name, entity_id: path.entityId }, "deleted a package no version records (a confirm that failed after its copy, or a version a restored database does not know)");
            }
          } catch (error) {
            this.#log.warn({ err: error, path: name }, "could not delete a stray blob; the next sweep retries it");
          }
        }
      };
      // Only under the service's own prefixes: a container shared with
      // anything else keeps everything else.
      for (const prefix of Object.values(areaPrefixes)) {
        if (this.#stopping) break;
        let batch: Listed[] = [];
        try {
          for await (const blob of this.#blobs.list(prefix)) {
            if (this.#stopping) break;
            if (blob.lastModified >= cutoff) continue;
            const path = parseUploadPath(blob.name);
            // A name of ours that we never make: left alone, like anything foreign.
            if (path === undefined || path.area === "legacy") continue;
            batch.push({ name: blob.name, path });
            if (batch.length < sweepBatchMax) continue;
            const full = batch;
            batch = [];
            await sweepBatch(full);
          }
        } catch (error) {
          // A listing that fails part-way: the blobs it listed before are
          // swept all the same, as they were when swept one by one.
          if (batch.length > 0 && !this.#stopping) await sweepBatch(batch);
          throw error;
        }
        if (batch.length > 0 && !this.#stopping) await sweepBatch(batch);
      }
      // Past the names the log holds, the others are still said to exist:
      // an operator who pushes again only what the log names would
      // otherwise lose them at the first sweep without the setting.
      if (keptUnnamed > 0) {
        this.#log.warn(
          { kept: done.keptPackages, unnamed: keptUnnamed, named: maxKeptNamed },
          `kept ${keptUnnamed} packages no version records beyond the first ${maxKeptNamed} the log names, as SWEEP_UNRECORDED_PACKAGES=off says: list versions/ in the blob container to find them (README, Backups)`,
        );
      }
      if (!this.#stopping) await this.#deleter.runOnce(1000);
    } catch (error) {
      this.#options.onSweep?.({ ...done }, error);
      throw error;
    }
    const result = { ...done };
    this.#options.onSweep?.(result);
    return result;
  }

  /** Sweeps every intervalMs (with jitter, so replicas drift apart) until stop(). */
  start(): void {
    const next = () => this.#options.intervalMs * (0.8 + Math.random() * 0.4);
    const tick = () => {
      this.#running = this.runOnce()
        .catch((error: unknown) => this.#log.error({ err: error }, "orphan sweep failed; retrying next interval"))
        .finally(() => {
          if (this.#timer !== undefined) this.#timer = setTimeout(tick, next()).unref();
        });
    };
    this.#timer = setTimeout(tick, next()).unref();
  }

  /** Stops sweeping, and waits for a sweep under way to end its current batch. */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}

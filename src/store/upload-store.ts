import type { Knex } from "knex";
import { countUpTo } from "./count-up-to.js";
import type { Database } from "./database.js";

/** An upload whose blobs are due for deletion. */
export interface DueDeletion {
  readonly id: string;
  readonly entityId: string;
  /** The deleted version whose own folder goes too (undefined: an upload never confirmed, or a version kept under the upload's id). */
  readonly versionId: string | undefined;
  readonly attempts: number;
}

/** Where the pending-deletion gauge stops counting: a backlog past it reads as this many. */
export const pendingCountMax = 100_000;

/**
 * The "deleting" uploads: blobs the records no longer reference and that
 * must go. Rows are claimed by a conditional update (a lease), so replicas
 * share the work without a lock service, and a crash mid-way only delays a
 * deletion until the lease runs out.
 */
export class UploadStore {
  readonly #knex: Knex;

  constructor(db: Database) {
    this.#knex = db.knex;
  }

  /** Deletions whose next attempt is due. */
  async dueDeletions(now: Date, limit: number): Promise<DueDeletion[]> {
    const rows = await this.#knex<{ id: string; entity_id: string; version_id: string | null; attempts: number }>("uploads")
      .where("state", "deleting")
      .andWhere("next_attempt_at", "<=", now)
      .orderBy("next_attempt_at")
      .limit(limit)
      .select("id", "entity_id", "version_id", "attempts");
    return rows.map((r) => ({ id: r.id, entityId: r.entity_id, versionId: r.version_id ?? undefined, attempts: Number(r.attempts) }));
  }

  /** Takes a deletion for `leaseUntil`; false when another worker took it first. */
  async claim(deletion: DueDeletion, leaseUntil: Date): Promise<boolean> {
    const updated = await this.#knex("uploads")
      .where({ entity_id: deletion.entityId, id: deletion.id, state: "deleting", attempts: deletion.attempts })
      .update({ attempts: deletion.attempts + 1, next_attempt_at: leaseUntil });
    return updated === 1;
  }

  /** Forgets an upload whose blobs are gone. */
  async finish(entityId: string, uploadId: string): Promise<void> {
    await this.#knex("uploads").where({ entity_id: entityId, id: uploadId, state: "deleting" }).delete();
  }

  /** The state of an upload ("issued", "confirmed", "deleting"), or undefined when there is no record. */
  async state(entityId: string, uploadId: string): Promise<string | undefined> {
    const row = await this.#knex("uploads").where({ entity_id: entityId, id: uploadId }).first("state");
    return (row as { state: string } | undefined)?.state;
  }

  /** Whether the entity has a version with this id (whose own blob folder is then in use). */
  async versionExists(entityId: string, versionId: string): Promise<boolean> {
    const row = await this.#knex("versions").where({ entity_id: entityId, id: versionId }).first("id");
    return row !== undefined;
  }

  /**
   * Marks uploads issued before `cutoff` and never confirmed as "deleting".
   * A conditional update per row: a confirm holding the row's lock either
   * confirmed it first (the update skips it) or finds it "deleting"
   * afterwards and refuses, so no version ever points at a swept blob.
   */
  async abandonIssuedBefore(cutoff: Date, now: Date, limit: number): Promise<number> {
    const rows: Array<{ id: string; entity_id: string }> = await abandonedUploads(this.#knex, cutoff, limit);
    let marked = 0;
    for (const row of rows) {
      marked += await this.#knex("uploads")
        .where({ entity_id: row.entity_id, id: row.id, state: "issued" })
        .update({ state: "deleting", next_attempt_at: now, attempts: 0 });
    }
    return marked;
  }

  /** Uploads marked for deletion and not yet done, up to pendingCountMax: the pending-deletion gauge. */
  async pendingCount(): Promise<number> {
    // Counted up to a bound, so that the cost of a scrape does not grow with a backlog.
    return countUpTo(this.#knex, this.#knex("uploads").where("state", "deleting"), pendingCountMax);
  }

  /** Schedules the next attempt after a failed one. */
  async retryAt(entityId: string, uploadId: string, at: Date): Promise<void> {
    await this.#knex("uploads").where({ entity_id: entityId, id: uploadId, state: "deleting" }).update({ next_attempt_at: at });
  }
}

/**
 * Uploads issued before `cutoff` and still open, up to `limit`: read by
 * the (state, created_at) index (migration 0012), so a sweep reads the
 * abandoned ones only, not every open upload.
 */
export function abandonedUploads(knex: Knex, cutoff: Date, limit: number): Knex.QueryBuilder<{ id: string; entity_id: string }[]> {
  return knex("uploads").where("state", "issued").andWhere("created_at", "<", cutoff).limit(limit).select("id", "entity_id");
}

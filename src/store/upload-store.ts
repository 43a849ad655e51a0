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

/** An upload or a version, named with its entity: every lookup of one is scoped by its entity. */
export interface ScopedId {
  readonly entityId: string;
  readonly id: string;
}

/** The key of an entity's upload or version in a lookup's answer (no entity id has a space). */
export const scopedKey = (entityId: string, id: string): string => `${entityId} ${id}`;

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

  /**
   * The states ("issued", "confirmed", "deleting") of those of these
   * uploads that have a record, by scopedKey(entity, upload): one statement
   * for a batch, each upload looked up under its own entity.
   */
  async states(uploads: readonly ScopedId[]): Promise<Map<string, string>> {
    if (uploads.length === 0) return new Map();
    const rows: Array<{ entity_id: string; id: string; state: string }> = await uploadStatesQuery(this.#knex, uploads);
    return new Map(rows.map((r) => [scopedKey(r.entity_id, r.id), r.state]));
  }

  /** Which of these versions exist (their own blob folders are then in use), by scopedKey(entity, version): one statement for a batch. */
  async versionsExisting(versions: readonly ScopedId[]): Promise<Set<string>> {
    if (versions.length === 0) return new Set();
    const rows: Array<{ entity_id: string; id: string }> = await versionsExistingQuery(this.#knex, versions);
    return new Set(rows.map((r) => scopedKey(r.entity_id, r.id)));
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

/**
 * The pairs of `ids` that `table` holds, each matched on its entity and its
 * id together (`(entity_id = ? and id = ?) or …`), so never another
 * entity's row under the same id: one lookup per pair by the primary key
 * on SQLite and, past a small table, on MySQL (test/contract/query-plans),
 * whatever an entity's history.
 */
function scopedLookup(knex: Knex, table: "uploads" | "versions", ids: readonly ScopedId[]): Knex.QueryBuilder {
  // Each pair once: an upload's package and lockfile are one lookup.
  const distinct = new Map(ids.map((i) => [scopedKey(i.entityId, i.id), i]));
  return knex(table).where((q) => {
    for (const { entityId, id } of distinct.values()) void q.orWhere({ entity_id: entityId, id });
  });
}

/** The states of these uploads that have a record: the sweeper's lookup of a listing batch. */
export function uploadStatesQuery(knex: Knex, uploads: readonly ScopedId[]): Knex.QueryBuilder<{ entity_id: string; id: string; state: string }[]> {
  return scopedLookup(knex, "uploads", uploads).select("entity_id", "id", "state");
}

/** Those of these versions that exist: the sweeper's lookup of a listing batch's version folders. */
export function versionsExistingQuery(knex: Knex, versions: readonly ScopedId[]): Knex.QueryBuilder<{ entity_id: string; id: string }[]> {
  return scopedLookup(knex, "versions", versions).select("entity_id", "id");
}

import type { Knex } from "knex";
import type { Database } from "./database.js";

/** An upload whose blobs are due for deletion. */
export interface DueDeletion {
  readonly id: string;
  readonly entityId: string;
  readonly attempts: number;
}

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
    const rows = await this.#knex<{ id: string; entity_id: string; attempts: number }>("uploads")
      .where("state", "deleting")
      .andWhere("next_attempt_at", "<=", now)
      .orderBy("next_attempt_at")
      .limit(limit)
      .select("id", "entity_id", "attempts");
    return rows.map((r) => ({ id: r.id, entityId: r.entity_id, attempts: Number(r.attempts) }));
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

  /** Schedules the next attempt after a failed one. */
  async retryAt(entityId: string, uploadId: string, at: Date): Promise<void> {
    await this.#knex("uploads").where({ entity_id: entityId, id: uploadId, state: "deleting" }).update({ next_attempt_at: at });
  }
}

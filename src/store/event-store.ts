import type { Knex } from "knex";
import type { Caller } from "../auth/caller.js";
import type { AccessFacts } from "../auth/policy.js";
import { untilAborted } from "./abandon.js";
import { type AccessFactRow, toAccessFacts } from "./access-store.js";
import type { Database } from "./database.js";
import { type EventRecord, type EventRow, toEventRecord } from "./event-log.js";
import { eventPageSql, eventPositionSql, eventsAfterSql, eventsPollSql } from "./event-queries.js";
import { preparedRunner, type RunPrepared } from "./prepared.js";
import { rawRows } from "./sql.js";

/** A page of an entity's events, newest first, or a missing entity, with the caller's access facts. */
export type EventPage = { readonly facts: AccessFacts } & (
  | { readonly kind: "page"; readonly events: readonly EventRecord[]; readonly hasMore: boolean }
  | { readonly kind: "entity-missing" }
);

/** Where an entity's events stand, or a missing entity, with the caller's access facts. */
export type EventPosition = { readonly facts: AccessFacts } & (
  | { readonly kind: "found"; readonly lastEventSeq: number }
  | { readonly kind: "entity-missing" }
);

/**
 * Reads of the event log (the writes happen in each change's own
 * transaction: event-log.ts). Each read is one statement scoped by entity
 * id, except the watchers' poll, which reads every watched entity at once.
 */
export class EventStore {
  readonly #knex: Knex;
  readonly #prepared: RunPrepared;

  constructor(db: Database) {
    this.#knex = db.knex;
    this.#prepared = preparedRunner(db);
  }

  /** A page of events before `beforeSeq`, newest first, and the caller's access: one prepared query. */
  async page(entityId: string, beforeSeq: number | undefined, limit: number, caller: Caller, signal?: AbortSignal): Promise<EventPage> {
    const q = eventPageSql(entityId, beforeSeq, limit, caller);
    const rows = await this.#prepared<EventRow & AccessFactRow>(q.text, q.params, signal);
    const facts = toAccessFacts(rows[0]);
    if (rows.length === 0) return { kind: "entity-missing", facts };
    const events = rows.filter((r) => r.seq !== null).sort((a, b) => Number(b.seq) - Number(a.seq));
    return { kind: "page", events: events.slice(0, limit).map(toEventRecord), hasMore: events.length > limit, facts };
  }

  /** The number of the entity's last event and the caller's access: one prepared query. */
  async position(entityId: string, caller: Caller, signal?: AbortSignal): Promise<EventPosition> {
    const q = eventPositionSql(entityId, caller);
    const [row] = await this.#prepared<{ last_event_seq: number | string } & AccessFactRow>(q.text, q.params, signal);
    const facts = toAccessFacts(row);
    return row === undefined ? { kind: "entity-missing", facts } : { kind: "found", lastEventSeq: Number(row.last_event_seq), facts };
  }

  /** Up to `limit` of the entity's events after `afterSeq`, oldest first. */
  async after(entityId: string, afterSeq: number, limit: number, signal?: AbortSignal): Promise<EventRecord[]> {
    const q = eventsAfterSql(entityId, afterSeq, limit);
    const rows = await this.#prepared<EventRow>(q.text, q.params, signal);
    return rows.slice(0, limit).map(toEventRecord);
  }

  /**
   * Deletes events that occurred before `cutoff`, looking at the oldest
   * `limit` of them; returns how many it deleted (0: none left to delete).
   * Each entity's events go as a prefix of its log (everything up to the
   * newest old event found, one statement per entity), so the numbers kept
   * stay without gaps after the first, and a watch that would need a
   * deleted event sees where they start (EVENTS_EXPIRED). The search for
   * old events is the one statement not scoped by entity: housekeeping
   * across the whole table, like the orphan sweep.
   */
  async pruneBefore(cutoff: Date, limit: number): Promise<number> {
    const old = await this.#knex("entity_events").where("occurred_at", "<", cutoff).orderBy("occurred_at").limit(limit).select<Array<{ entity_id: string; seq: number | string }>>("entity_id", "seq");
    const through = new Map<string, number>();
    for (const row of old) through.set(row.entity_id, Math.max(through.get(row.entity_id) ?? 0, Number(row.seq)));
    let deleted = 0;
    for (const [entityId, seq] of through) deleted += await this.#knex("entity_events").where("entity_id", entityId).andWhere("seq", "<=", seq).delete();
    return deleted;
  }

  /**
   * Up to `limit` events of the given entities, each after its own number,
   * ordered by entity and number: one statement for every watched entity.
   * Not prepared: its text varies with the number of entities.
   */
  async poll(cursors: ReadonlyMap<string, number>, limit: number, signal?: AbortSignal): Promise<EventRecord[]> {
    if (cursors.size === 0) return [];
    const q = eventsPollSql(cursors, limit);
    return rawRows<EventRow>(await untilAborted(Promise.resolve(this.#knex.raw(q.text, q.params as never)), signal)).map(toEventRecord);
  }
}

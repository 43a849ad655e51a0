import type { Knex } from "knex";

/** What kind of change an event records: the proto's EventType names without their prefix. */
export type EventKind = "VERSION_CREATED" | "ACTIVE_VERSION_CHANGED" | "VERSION_DELETED" | "ACCESS_CHANGED";

/** What an access change added or removed: the proto's AccessChangeKind names without their prefix. */
export type AccessChangeKind =
  | "PUBLISHER_ADDED"
  | "PUBLISHER_REMOVED"
  | "SHARE_ADDED"
  | "SHARE_REMOVED"
  | "ORG_STORE_ADDED"
  | "ORG_STORE_REMOVED"
  | "PUBLIC_STORE_ADDED"
  | "PUBLIC_STORE_REMOVED";

/** A change to record, as the code that makes it knows it. */
export type NewEvent =
  | { readonly type: "VERSION_CREATED" | "VERSION_DELETED"; readonly versionId: string; readonly version: string }
  | {
      readonly type: "ACTIVE_VERSION_CHANGED";
      readonly versionId: string;
      readonly version: string;
      /** The version active before; undefined when none was. */
      readonly previousActiveVersionId: string | undefined;
    }
  | { readonly type: "ACCESS_CHANGED"; readonly accessKind: AccessChangeKind; readonly subject: string | undefined };

/** A recorded event, as read back. */
export interface EventRecord {
  readonly entityId: string;
  /** The event's number within its entity: 1, 2, 3, … with no gaps. */
  readonly seq: number;
  readonly type: EventKind;
  readonly actor: string;
  readonly occurredAt: Date;
  readonly versionId: string | undefined;
  readonly version: string | undefined;
  readonly previousActiveVersionId: string | undefined;
  readonly accessKind: AccessChangeKind | undefined;
  readonly accessSubject: string | undefined;
}

/** The columns of an event row, as the readers select them. */
export const eventColumns = [
  "entity_id",
  "seq",
  "type",
  "actor",
  "occurred_at",
  "version_id",
  "version",
  "previous_active_version_id",
  "access_kind",
  "access_subject",
] as const;

/** An entity_events row. */
export interface EventRow {
  entity_id: string;
  seq: number | string;
  type: string;
  actor: string;
  occurred_at: Date | number | string;
  version_id: string | null;
  version: string | null;
  previous_active_version_id: string | null;
  access_kind: string | null;
  access_subject: string | null;
}

/** Reads an event row. */
export function toEventRecord(row: EventRow): EventRecord {
  return {
    entityId: row.entity_id,
    seq: Number(row.seq),
    type: row.type as EventKind,
    actor: row.actor,
    occurredAt: new Date(row.occurred_at),
    versionId: row.version_id ?? undefined,
    version: row.version ?? undefined,
    previousActiveVersionId: row.previous_active_version_id ?? undefined,
    accessKind: (row.access_kind ?? undefined) as AccessChangeKind | undefined,
    accessSubject: row.access_subject ?? undefined,
  };
}

/** Who made a change and when: what every event of it records. */
export interface ChangeContext {
  /** The caller's user id (the token's sub). */
  readonly actor: string;
  readonly at: Date;
}

/**
 * The rows of an entity's new events, numbered on from `lastEventSeq` (the
 * entity row's last_event_seq, read under its lock), and the number of the
 * last one: what the entity row's last_event_seq becomes.
 */
export function numberEvents(
  entityId: string,
  lastEventSeq: number,
  change: ChangeContext,
  events: readonly NewEvent[],
): { rows: Array<Record<string, unknown>>; lastEventSeq: number } {
  const rows = events.map((event, i) => ({
    entity_id: entityId,
    seq: lastEventSeq + i + 1,
    type: event.type,
    actor: change.actor,
    occurred_at: change.at,
    version_id: "versionId" in event ? event.versionId : null,
    version: "version" in event ? event.version : null,
    previous_active_version_id: event.type === "ACTIVE_VERSION_CHANGED" ? (event.previousActiveVersionId ?? null) : null,
    access_kind: event.type === "ACCESS_CHANGED" ? event.accessKind : null,
    access_subject: event.type === "ACCESS_CHANGED" ? (event.subject ?? null) : null,
  }));
  return { rows, lastEventSeq: lastEventSeq + events.length };
}

/** The entities each open transaction wrote events of: what its commit announces (inTransaction's `onEventsCommitted`). */
const writtenIn = new WeakMap<Knex.Transaction, Set<string>>();

/**
 * Inserts numbered event rows (numberEvents) in a change's transaction,
 * and notes their entities, so that the commit, and only the commit, tells
 * the event hub: no write path has to remember to.
 */
export async function insertEvents(trx: Knex.Transaction, rows: ReadonlyArray<Record<string, unknown>>): Promise<void> {
  if (rows.length === 0) return;
  await trx("entity_events").insert(rows);
  let entities = writtenIn.get(trx);
  if (entities === undefined) writtenIn.set(trx, (entities = new Set()));
  for (const row of rows) entities.add(String(row["entity_id"]));
}

/** The entities whose events the transaction wrote (insertEvents). */
export function entitiesWithEventsIn(trx: Knex.Transaction): readonly string[] {
  const entities = writtenIn.get(trx);
  return entities === undefined ? [] : [...entities];
}

/**
 * Records a change's events in the change's own transaction, which holds
 * the entity row's lock: inserts them, numbered on from the entity's
 * last_event_seq, and moves last_event_seq, together with the change's own
 * columns of the entity row (`entityUpdate`). The lock makes an entity's
 * events strictly ordered and gap-free; the transaction makes them exactly
 * the changes that were committed.
 */
export async function recordEvents(
  trx: Knex.Transaction,
  entity: { readonly id: string; readonly last_event_seq: number | string },
  change: ChangeContext,
  events: readonly NewEvent[],
  entityUpdate: Record<string, unknown> = {},
): Promise<void> {
  const { rows, lastEventSeq } = numberEvents(entity.id, Number(entity.last_event_seq), change, events);
  await insertEvents(trx, rows);
  await trx("entities").where("id", entity.id).update({ ...entityUpdate, last_event_seq: lastEventSeq });
}

import type { Caller } from "../auth/caller.js";
import { accessFactsSql, readableEntitySql } from "./access-store.js";
import { eventColumns } from "./event-log.js";
import { joinSql, rawSql, type Sql, sql } from "./sql.js";
import { nextPowerOfTwo } from "./statement-shapes.js";

// The event log's reads, one function each, so that the store runs them and
// the query-plan tests EXPLAIN the very same text. Every one is scoped by
// entity id and walks the (entity_id, seq) primary key.

const columnsOf = (alias: string) => rawSql(eventColumns.map((c) => `${alias}.${c}`).join(", "));

/** Rounded up to a power of two and written into the text, so that few prepared statements serve every limit. */
const limitOf = (n: number) => rawSql(String(nextPowerOfTwo(Math.trunc(n))));

/**
 * A page of the entity's events, newest first, before `beforeSeq`, with
 * the entity's last event number and the caller's access facts
 * (ListEvents): one row per event, or one row of nulls when the entity has
 * none; no row when the entity does not exist. Ordered and limited inside
 * a query on entity_events alone, as a page of versions is, so a page
 * costs the same anywhere in a long history. Reads limit + 1 rows (rounded
 * up), so the caller learns whether there are more. A caller who may not
 * read the entity gets the facts alone, and no event is read for it
 * (readableEntitySql).
 */
export function eventPageSql(entityId: string, beforeSeq: number | undefined, limit: number, caller: Caller): Sql {
  const facts = accessFactsSql(caller);
  const page = sql`select ${columnsOf("p")} from entity_events p where p.entity_id = ${entityId}${
    beforeSeq === undefined ? rawSql("") : sql` and p.seq < ${beforeSeq}`
  } and ${readableEntitySql(entityId, caller)} order by p.seq desc limit ${limitOf(limit + 1)}`;
  return sql`select ${columnsOf("v")}, ${facts.columns} from entities e ${facts.joins} left join (${page}) v on ${facts.readable} where e.id = ${entityId}`;
}

/** Where the entity's events stand (its last event's number) and the caller's access facts: how a watch starts. */
export function eventPositionSql(entityId: string, caller: Caller): Sql {
  const facts = accessFactsSql(caller);
  return sql`select e.last_event_seq, ${facts.columns} from entities e ${facts.joins} where e.id = ${entityId}`;
}

/** The entity's events after `afterSeq`, oldest first, at most `limit` (rounded up): a watch's replay. */
export function eventsAfterSql(entityId: string, afterSeq: number, limit: number): Sql {
  return sql`select ${columnsOf("p")} from entity_events p where p.entity_id = ${entityId} and p.seq > ${afterSeq} order by p.seq limit ${limitOf(limit)}`;
}

/**
 * The events of every watched entity after the last one read of each,
 * ordered by entity and number, at most `limit`: one statement, however
 * many entities are watched, each part a range of the primary key.
 */
export function eventsPollSql(cursors: ReadonlyMap<string, number>, limit: number): Sql {
  const parts = [...cursors].map(([entityId, afterSeq]) => sql`(p.entity_id = ${entityId} and p.seq > ${afterSeq})`);
  return sql`select ${columnsOf("p")} from entity_events p where ${joinSql(parts, " or ")} order by p.entity_id, p.seq limit ${rawSql(String(Math.trunc(limit)))}`;
}

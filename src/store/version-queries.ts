import type { Caller } from "../auth/caller.js";
import { accessFactsSql, readableEntitySql } from "./access-store.js";
import { rawSql, type Sql, sql } from "./sql.js";
import type { Dialect } from "./database.js";
import { nextPowerOfTwo } from "./statement-shapes.js";
import type { PushRequest } from "./version-store.js";

// The hot statements of the version store, one function each, so that the
// store runs them and the query-plan tests EXPLAIN the very same text.

/** The columns of a version row (aliased `v`, with its entity `e`), as the store reads every version. */
export const versionColumns = [
  "v.id",
  "v.entity_id",
  "v.seq",
  "v.version",
  "v.source_hash",
  "v.upload_id",
  "v.storage_path",
  "v.file_size_bytes",
  "v.package_md5",
  "v.package_lock_path",
  "v.service_dependencies",
  "v.package_json",
  "v.base_version_id",
  "v.published_by",
  "v.created_at",
  "e.active_version_id",
];

/** The same columns as SQL text. */
const versionColumnsSql = versionColumns.join(", ");

/** The columns of a page of versions, read from `versions` alone (aliased `p`) and exposed as `v`. */
const pageColumnsSql = versionColumns
  .filter((c) => c.startsWith("v."))
  .map((c) => `p.${c.slice(2)}`)
  .join(", ");


/** One version by id (with whether it is active), for a decision's rare paths. */
export function versionByIdSql(entityId: string, versionId: string): Sql {
  return sql`select ${rawSql(versionColumnsSql)} from entities e join versions v on v.entity_id = e.id and v.id = ${versionId} where e.id = ${entityId}`;
}

/** The entity's active version, where the caller may read it, and the caller's access facts (GetActiveVersion). */
export function activeVersionSql(entityId: string, caller: Caller): Sql {
  const facts = accessFactsSql(caller);
  return sql`select ${rawSql(versionColumnsSql)}, ${facts.columns} from entities e ${facts.joins} left join versions v on v.id = e.active_version_id and v.entity_id = e.id and ${facts.readable} where e.id = ${entityId}`;
}

/** One version, where the caller may read it, and the caller's access facts (GetVersion, GetDownloadUrl). */
export function versionWithFactsSql(entityId: string, versionId: string, caller: Caller): Sql {
  const facts = accessFactsSql(caller);
  return sql`select ${rawSql(versionColumnsSql)}, ${facts.columns} from entities e ${facts.joins} left join versions v on v.entity_id = e.id and v.id = ${versionId} and ${facts.readable} where e.id = ${entityId}`;
}

/**
 * A page of versions, newest first, before `beforeSeq`, with the caller's
 * access facts (ListVersions). The page is chosen inside a query on
 * `versions` alone, which walks the (entity_id, seq, data_cost) index
 * from the cursor: a page costs the same at the start and at the end of a
 * long history (joined to entities first, MySQL would sort every version
 * of the entity). It holds up to `limit` versions, and ends early once the
 * versions before it hold `maxBytes` of data (package_json and
 * service_dependencies), one version at least: that is decided from the
 * index alone, so a version past the budget is never read, nor one past
 * the page. Each row also says how many the read found (`page_rows`):
 * more than the page holds means a next page. The limit is written into
 * the text, rounded up to a power of two, so that a handful of prepared
 * statements serve every page size. A caller who may not read the entity
 * gets the facts alone, and no version is read for it: the access check is
 * also a condition of the page's choice (readableEntitySql).
 */
export function versionPageSql(entityId: string, beforeSeq: number | undefined, limit: number, caller: Caller, maxBytes: number, dialect: Dialect): Sql {
  const facts = accessFactsSql(caller);
  const rows = sql`select q.seq, q.data_cost from versions q where q.entity_id = ${entityId}${
    beforeSeq === undefined ? rawSql("") : sql` and q.seq < ${beforeSeq}`
  } and ${readableEntitySql(entityId, caller)} order by q.seq desc limit ${rawSql(String(nextPowerOfTwo(Math.trunc(limit) + 1)))}`;
  const sized = sql`select x.seq, row_number() over (order by x.seq desc) as page_place, count(*) over () as page_rows, sum(x.data_cost) over (order by x.seq desc) - x.data_cost as bytes_before from (${rows}) x`;
  // The chosen rows first, then each version by its key: in that order
  // whatever the planner guesses (it read every version of a small entity
  // first, manifests and all), with each dialect's join that keeps order.
  const inOrder = rawSql(dialect === "mysql" ? "straight_join" : "cross join");
  const page = sql`select ${rawSql(pageColumnsSql)}, w.page_rows from (${sized}) w ${inOrder} versions p on p.entity_id = ${entityId} and p.seq = w.seq where w.page_place <= ${Math.trunc(limit)} and w.bytes_before < ${rawSql(String(Math.trunc(maxBytes)))}`;
  return sql`select ${rawSql(versionColumnsSql)}, v.page_rows, ${facts.columns} from entities e ${facts.joins} left join (${page}) v on ${facts.readable} where e.id = ${entityId}`;
}

/**
 * What a push is decided from, in one statement that answers one row
 * whether or not the entity has one yet (a first push): the entity row
 * (aliased `e`) with the caller's access facts and the tip, and the ids of
 * the newest version with the pushed source, of the version with the
 * pushed version string, and of the version the confirmed upload already
 * produced, with the upload's state and the existing version a confirm of
 * it made active. `prefix` goes first in the select
 * list (a group's part number). Every subquery is an indexed lookup on one
 * entity.
 */
export function pushFactsSql(push: PushRequest, prefix: Sql = rawSql("")): Sql {
  const facts = accessFactsSql(push.caller, { hasPublishers: true });
  const uploadId = push.uploadId ?? null;
  return sql`select ${prefix}e.id as entity_found, e.tip_version_id, e.active_version_id, e.last_seq, ${facts.columns}, (select d.id from versions d where d.entity_id = k.id and d.source_hash = ${push.sourceHash} order by d.seq desc limit 1) as duplicate_id, (select t.id from versions t where t.entity_id = k.id and t.version = ${push.version}) as taken_id, (select r.id from versions r where r.entity_id = k.id and r.upload_id = ${uploadId}) as upload_version_id, (select u.state from uploads u where u.id = ${uploadId} and u.entity_id = k.id) as upload_state, (select a.activated_version_id from uploads a where a.id = ${uploadId} and a.entity_id = k.id) as upload_activated_id from (select ${push.entityId} as id) k left join entities e on e.id = k.id ${facts.joins}`;
}


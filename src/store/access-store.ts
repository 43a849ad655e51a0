import type { Knex } from "knex";
import type { Caller } from "../auth/caller.js";
import { type AccessFacts, type Decision, decideRead, noAccess } from "../auth/policy.js";
import type { Database } from "./database.js";
import { type AccessChangeKind, type ChangeContext, recordEvents } from "./event-log.js";
import { preparedRunner, type RunPrepared } from "./prepared.js";
import { rawRows, type Sql, sql } from "./sql.js";
import { nextPowerOfTwo } from "./statement-shapes.js";
import { untilAborted } from "./abandon.js";
import { inTransaction } from "./transaction.js";

/** Who may use an entity, as stored. */
export interface EntityAccessRecord {
  readonly entityId: string;
  readonly publishers: readonly string[];
  readonly shares: readonly string[];
  readonly orgStores: readonly string[];
  readonly publicStore: boolean;
}

/** A change to an entity's access. */
export type AccessChange =
  | { readonly op: "add-publisher" | "remove-publisher" | "add-share" | "remove-share"; readonly userId: string }
  | { readonly op: "add-org-store" | "remove-org-store"; readonly orgId: string }
  | { readonly op: "set-public"; readonly value: boolean };

/** The kind of event each change records when it changes something. */
const eventKinds: Readonly<Record<AccessChange["op"], AccessChangeKind | undefined>> = {
  "add-publisher": "PUBLISHER_ADDED",
  "remove-publisher": "PUBLISHER_REMOVED",
  "add-share": "SHARE_ADDED",
  "remove-share": "SHARE_REMOVED",
  "add-org-store": "ORG_STORE_ADDED",
  "remove-org-store": "ORG_STORE_REMOVED",
  // Decided by the value: see change().
  "set-public": undefined,
};

/**
 * A caller's right to make a change, decided again under the entity's lock
 * from facts read in the change's own transaction. The service decides
 * from a plain read first, so that a caller without access takes no lock;
 * this second decision is the one that counts: a publisher removed while
 * their call waited for the lock is refused, not let through on facts read
 * before the removal committed.
 */
export interface ChangeAuthorization {
  readonly caller: Caller;
  /** The policy of the change (decideWrite): allow, or how to refuse. */
  readonly decide: (facts: AccessFacts) => Decision;
}

/** A change refused under the entity's lock, and how (hidden: as if the entity did not exist). */
export interface RefusedChange {
  readonly kind: "refused";
  readonly decision: "hidden" | "forbidden";
}

/**
 * The refusal of `authorization` for the entity whose row `trx` has locked,
 * or undefined when it allows. Every change to an entity serialises on that
 * row's lock, and the facts are read after it was taken, so they include
 * every access change committed before this one began.
 */
export async function refusedUnderLock(trx: Knex.Transaction, entityId: string, authorization: ChangeAuthorization): Promise<RefusedChange | undefined> {
  const facts = accessFactsSql(authorization.caller, { hasPublishers: true });
  const q = sql`select ${facts.columns} from entities e ${facts.joins} where e.id = ${entityId}`;
  const [row] = rawRows<AccessFactRow>(await trx.raw(q.text, q.params as never));
  const decision = authorization.decide(toAccessFacts(row));
  return decision === "hidden" || decision === "forbidden" ? { kind: "refused", decision } : undefined;
}

/** How a change ended. */
export type AccessChangeOutcome =
  | RefusedChange
  | { readonly kind: "changed"; readonly access: EntityAccessRecord }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "last-publisher" }
  /** Adding would make the list longer than the service allows. */
  | { readonly kind: "list-full"; readonly list: "publishers" | "shares" | "org stores"; readonly limit: number };

/** The raw columns the access facts are selected as. */
export interface AccessFactRow {
  is_publisher: number | string | boolean | null;
  has_publishers: number | string | boolean | null;
  is_shared: number | string | boolean | null;
  in_org_store: number | string | boolean | null;
  public_store: number | string | boolean | null;
}

const truthy = (v: number | string | boolean | null | undefined) => v === true || Number(v) === 1;

/** Reads access facts from a row selected with accessFactColumns. */
export function toAccessFacts(row: AccessFactRow | undefined): AccessFacts {
  return {
    isPublisher: truthy(row?.is_publisher),
    // Not selected (null) on reads: assumed true, so that facts read for a
    // read can never let a push claim the entity.
    hasPublishers: row !== undefined && (row.has_publishers === null || truthy(row.has_publishers)),
    isShared: truthy(row?.is_shared),
    inOrgStore: truthy(row?.in_org_store),
    isPublic: truthy(row?.public_store),
  };
}

/** Per-org joins up to this many of the caller's organizations; beyond, one EXISTS … IN. */
const maxOrgJoins = 8;

/** The SQL that reads one caller's access facts, in the two places a statement needs it, each with its own values. */
export interface AccessFactsSql {
  /** Select-list columns named as in AccessFactRow. */
  readonly columns: Sql;
  /** LEFT JOINs to write right after `from entities e`. */
  readonly joins: Sql;
  /**
   * decideRead as a condition on the same joins, for a statement to read
   * an entity's versions only where the caller may read them: a caller
   * without access is answered from the facts alone, so a long history or
   * large manifests do not slow its refusal down. decideRead still
   * decides (test/read-condition.test.ts checks that the two agree).
   */
  readonly readable: Sql;
}

function padToPowerOfTwo(values: readonly string[]): readonly string[] {
  const size = nextPowerOfTwo(values.length);
  return size === values.length ? values : [...values, ...Array<string>(size - values.length).fill(values[values.length - 1]!)];
}

const factsSqlCache = new Map<string, { columns: string; joins: string; readable: string; orgsInColumns: boolean }>();

/**
 * SQL computing one caller's access facts for the entity row aliased `e`,
 * so that any statement on an entity carries its own access check and a
 * read costs one round trip. The caller's rows are LEFT JOINs on primary
 * keys (entity, user) and (entity, org), which MariaDB resolves as eq_ref
 * lookups, cheaper than the same facts as EXISTS subqueries it re-plans on
 * every execution. Each join matches at most one row, so the joins never
 * multiply the statement's rows. `has_publishers` (only pushes decide on
 * it) is computed only when asked for. Memoised by shape, so each shape is
 * one prepared statement.
 */
export function accessFactsSql(caller: Caller, options: { readonly hasPublishers?: boolean } = {}): AccessFactsSql {
  // The org list is padded (repeating the last org, which changes no
  // answer) to a power of two, so that few statement shapes serve every
  // org count: each shape is a prepared statement per batch size, and a
  // connection keeps 128.
  const orgs = caller.orgs.length === 0 ? caller.orgs : padToPowerOfTwo(caller.orgs);
  const n = orgs.length;
  const withPublishers = options.hasPublishers === true;
  // A caller decideRead allows without any fact (an admin) reads everywhere.
  const readsAll = decideRead(caller, noAccess) === "allow";
  const key = `${n}:${withPublishers ? 1 : 0}:${readsAll ? 1 : 0}`;
  let shape = factsSqlCache.get(key);
  if (shape === undefined) {
    const orgJoins = n <= maxOrgJoins ? Array.from({ length: n }, (_, i) => `ao${i}`) : [];
    const inOrgStore =
      n === 0
        ? "0"
        : n <= maxOrgJoins
          ? `(${orgJoins.map((a) => `${a}.org_id is not null`).join(" or ")})`
          : `exists(select 1 from entity_org_stores ao where ao.entity_id = e.id and ao.org_id in (${Array(n).fill("?").join(", ")}))`;
    const columns = [
      "ap.user_id is not null as is_publisher",
      withPublishers ? "exists(select 1 from entity_publishers ah where ah.entity_id = e.id) as has_publishers" : "null as has_publishers",
      "ash.user_id is not null as is_shared",
      `${inOrgStore} as in_org_store`,
      "e.public_store as public_store",
    ].join(", ");
    const joins = [
      "left join entity_publishers ap on ap.entity_id = e.id and ap.user_id = ?",
      "left join entity_shares ash on ash.entity_id = e.id and ash.user_id = ?",
      ...orgJoins.map((a) => `left join entity_org_stores ${a} on ${a}.entity_id = e.id and ${a}.org_id = ?`),
    ].join(" ");
    const readable = readsAll ? "1 = 1" : `(ap.user_id is not null or ash.user_id is not null or ${inOrgStore} or e.public_store <> 0)`;
    shape = { columns, joins, readable, orgsInColumns: n > maxOrgJoins };
    factsSqlCache.set(key, shape);
  }
  return {
    columns: { text: shape.columns, params: shape.orgsInColumns ? orgs : [] },
    joins: { text: shape.joins, params: shape.orgsInColumns ? [caller.id, caller.id] : [caller.id, caller.id, ...orgs] },
    readable: { text: shape.readable, params: shape.orgsInColumns && !readsAll ? orgs : [] },
  };
}

/**
 * A condition that holds when `caller` may read the entity: put into the
 * query that chooses a page's rows, so that a caller without access makes
 * the database read none of them (its refusal costs the same however long
 * the entity's history, and says nothing of it by its time). Uncorrelated,
 * it is evaluated once per statement.
 */
export function readableEntitySql(entityId: string, caller: Caller): Sql {
  const facts = accessFactsSql(caller);
  return sql`exists(select 1 from entities e ${facts.joins} where e.id = ${entityId} and ${facts.readable})`;
}

/**
 * Entity access in SQL. Reads compute one caller's facts in one query;
 * changes take the entity row's lock (creating the row for an entity that
 * has none yet), so they serialise with confirms and their first-push claim.
 */
export class AccessStore {
  readonly #knex: Knex;
  readonly #prepared: RunPrepared;
  readonly #recorded: (entityIds: readonly string[]) => void;
  readonly #maxEntries: number;

  /** `onEventsRecorded` is told of each committed change (the event hub's prompt). */
  constructor(
    db: Database,
    options: {
      readonly onEventsRecorded?: (entityIds: readonly string[]) => void;
      /** Most entries each of an entity's lists (publishers, shares, org stores) may have: every access answer carries them all. */
      readonly maxEntries?: number;
    } = {},
  ) {
    this.#maxEntries = options.maxEntries ?? 1000;
    this.#knex = db.knex;
    this.#prepared = preparedRunner(db);
    this.#recorded = options.onEventsRecorded ?? (() => undefined);
  }

  /** One caller's access facts for one entity, in one prepared query. */
  async facts(entityId: string, caller: Caller, signal?: AbortSignal): Promise<AccessFacts> {
    const facts = accessFactsSql(caller, { hasPublishers: true });
    const q = sql`select ${facts.columns} from entities e ${facts.joins} where e.id = ${entityId}`;
    const rows = await this.#prepared<AccessFactRow>(q.text, q.params, signal);
    return toAccessFacts(rows[0]);
  }

  async #read(q: Knex | Knex.Transaction, entityId: string): Promise<EntityAccessRecord | undefined> {
    const entity = await q<{ public_store: number | boolean }>("entities").where("id", entityId).first("public_store");
    if (entity === undefined) return undefined;
    const [publishers, shares, orgStores] = await Promise.all([
      q("entity_publishers").where("entity_id", entityId).orderBy("user_id").pluck("user_id"),
      q("entity_shares").where("entity_id", entityId).orderBy("user_id").pluck("user_id"),
      q("entity_org_stores").where("entity_id", entityId).orderBy("org_id").pluck("org_id"),
    ]);
    return { entityId, publishers, shares, orgStores, publicStore: truthy(entity.public_store) };
  }

  /** The entity's access; undefined when the entity does not exist. */
  async get(entityId: string, signal?: AbortSignal): Promise<EntityAccessRecord | undefined> {
    return untilAborted(this.#read(this.#knex, entityId), signal);
  }

  /** Whether the entity's list in `table` is at the limit (counted under the entity lock). */
  async #full(trx: Knex.Transaction, table: string, entityId: string): Promise<boolean> {
    const [row] = await trx(table).where("entity_id", entityId).count({ n: "*" });
    return Number(row?.["n"] ?? 0) >= this.#maxEntries;
  }

  /**
   * Applies one change under the entity lock, if `authorization` still
   * allows it there, and records it as an ACCESS_CHANGED event in the same
   * transaction; adding what is there and removing what is not change
   * nothing and record nothing. An entity that does not exist is left so:
   * it comes into being with its first push, never with an access change
   * (which would leave a row with no publishers, claimable by anyone).
   */
  async change(
    entityId: string,
    change: AccessChange,
    context: ChangeContext,
    authorization: ChangeAuthorization,
    signal?: AbortSignal,
  ): Promise<AccessChangeOutcome> {
    return inTransaction<AccessChangeOutcome>(this.#knex, async (trx) => {
      const entity = await trx<{ id: string; last_event_seq: number | string; public_store: number | boolean }>("entities")
        .where("id", entityId)
        .forUpdate()
        .first("id", "last_event_seq", "public_store");
      if (entity === undefined) return { commit: false, result: { kind: "entity-missing" as const } };
      const refused = await refusedUnderLock(trx, entityId, authorization);
      if (refused !== undefined) return { commit: false, result: refused };
      const unchanged = async () => ({ commit: false, result: { kind: "changed" as const, access: (await this.#read(trx, entityId))! } });
      let subject: string | undefined;
      switch (change.op) {
        case "add-publisher":
        case "add-share": {
          const table = change.op === "add-publisher" ? "entity_publishers" : "entity_shares";
          // Under the entity lock nobody else adds or removes it meanwhile.
          if ((await trx(table).where({ entity_id: entityId, user_id: change.userId }).first("user_id")) !== undefined) return unchanged();
          if (await this.#full(trx, table, entityId)) {
            return { commit: false, result: { kind: "list-full" as const, list: change.op === "add-publisher" ? ("publishers" as const) : ("shares" as const), limit: this.#maxEntries } };
          }
          await trx(table).insert({ entity_id: entityId, user_id: change.userId });
          subject = change.userId;
          break;
        }
        case "remove-publisher": {
          const publishers: string[] = await trx("entity_publishers").where("entity_id", entityId).pluck("user_id");
          if (!publishers.includes(change.userId)) return unchanged();
          if (publishers.length === 1) return { commit: false, result: { kind: "last-publisher" as const } };
          await trx("entity_publishers").where({ entity_id: entityId, user_id: change.userId }).delete();
          subject = change.userId;
          break;
        }
        case "remove-share":
          if ((await trx("entity_shares").where({ entity_id: entityId, user_id: change.userId }).delete()) === 0) return unchanged();
          subject = change.userId;
          break;
        case "add-org-store":
          if ((await trx("entity_org_stores").where({ entity_id: entityId, org_id: change.orgId }).first("org_id")) !== undefined) return unchanged();
          if (await this.#full(trx, "entity_org_stores", entityId)) return { commit: false, result: { kind: "list-full" as const, list: "org stores" as const, limit: this.#maxEntries } };
          await trx("entity_org_stores").insert({ entity_id: entityId, org_id: change.orgId });
          subject = change.orgId;
          break;
        case "remove-org-store":
          if ((await trx("entity_org_stores").where({ entity_id: entityId, org_id: change.orgId }).delete()) === 0) return unchanged();
          subject = change.orgId;
          break;
        case "set-public":
          if (truthy(entity.public_store) === change.value) return unchanged();
          break;
      }
      const accessKind = eventKinds[change.op] ?? (change.op === "set-public" && change.value ? "PUBLIC_STORE_ADDED" : "PUBLIC_STORE_REMOVED");
      await recordEvents(
        trx,
        entity,
        context,
        [{ type: "ACCESS_CHANGED", accessKind, subject }],
        change.op === "set-public" ? { public_store: change.value } : {},
      );
      return { commit: true, result: { kind: "changed" as const, access: (await this.#read(trx, entityId))! } };
    }, { signal, onEventsCommitted: this.#recorded });
  }
}

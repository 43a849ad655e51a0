import type { Knex } from "knex";
import { defaultPageMaxBytes } from "../config.js";
import type { Caller } from "../auth/caller.js";
import type { AccessFacts, Decision } from "../auth/policy.js";
import { decidePush, type PushFacts, type PushIntent, type PushOutcome } from "../domain/push-decision.js";
import { versionDataCost } from "../domain/version-data-cost.js";
import { type AccessFactRow, type ChangeAuthorization, type RefusedChange, refusedUnderLock, toAccessFacts } from "./access-store.js";
import { confirmGrouper } from "./confirm-grouper.js";
import type { Database, Dialect } from "./database.js";
import { countUpTo } from "./count-up-to.js";
import { type ChangeContext, insertEvents, type NewEvent, numberEvents, recordEvents } from "./event-log.js";
import { preparedRunner } from "./prepared.js";
import { readBatcher, type RunBatched } from "./read-batcher.js";
import { joinSql, rawRows, rawSql, type Sql, sql } from "./sql.js";
import { activeVersionSql, pushFactsSql, versionByIdSql, versionColumns, versionPageSql, versionWithFactsSql } from "./version-queries.js";
import { untilAborted } from "./abandon.js";
import { inTransaction } from "./transaction.js";

/** A JSON object, as package_json is stored. */
export type JsonObject = { [key: string]: unknown };

/** A stored version, with whether it is its entity's active one. */
export interface VersionRecord {
  readonly id: string;
  readonly entityId: string;
  /** Creation order within the entity; the tip has the highest. */
  readonly seq: number;
  readonly version: string;
  readonly sourceHash: string;
  readonly uploadId: string;
  readonly storagePath: string;
  readonly fileSizeBytes: number;
  /** Content-MD5 of the package (base64) as the blob store reported it at confirm. */
  readonly packageMd5: string | undefined;
  readonly packageLockPath: string | undefined;
  readonly serviceDependencies: readonly string[];
  readonly packageJson: JsonObject | undefined;
  readonly baseVersionId: string | undefined;
  readonly publishedBy: string;
  readonly createdAt: Date;
  readonly isActive: boolean;
}

/** What a push is, as the store decides it: the request's own parameters. */
export interface PushRequest {
  readonly entityId: string;
  readonly sourceHash: string;
  readonly version: string;
  /** The base the client named; "" when none. */
  readonly baseVersionId: string;
  readonly force: boolean;
  readonly setAsActive: boolean;
  readonly caller: Caller;
  /** Decides, from the caller's access facts, whether the push may go on (with a first push's claim). */
  readonly authorize: (facts: AccessFacts, hasVersions: boolean) => Decision;
  /** Confirm only: the upload it confirms. */
  readonly uploadId?: string | undefined;
  /** Confirm only: the package's size, as the request states it. */
  readonly fileSizeBytes?: number | undefined;
  /** The call's signal: its deadline. Reads stop waiting, and a transaction never commits, once it aborts. */
  readonly signal?: AbortSignal | undefined;
}

/** What ConfirmUpload asks the store to record. */
export interface NewVersion extends PushRequest {
  readonly id: string;
  readonly uploadId: string;
  readonly storagePath: string;
  readonly fileSizeBytes: number;
  readonly packageMd5: string | undefined;
  readonly packageLockPath: string | undefined;
  readonly serviceDependencies: readonly string[];
  readonly packageJson: JsonObject | undefined;
  readonly now: Date;
  /**
   * Whether the version's blobs are in place, so that the transaction may
   * create it. False for a confirm expected to answer an existing version
   * (and activate it): should the locked decision be a creation after all,
   * it answers "changed" instead, and the caller starts over.
   */
  readonly mayCreate: boolean;
  /**
   * Whether the entity existed when the push's pre-check read it: its row
   * is then locked directly (else made first), and only such a confirm may
   * join a group. The transaction decides again under the lock either way.
   */
  readonly entityExisted?: boolean | undefined;
}

/** How a confirm ended; "created", and "existing" when it was activated, wrote. */
export type ConfirmOutcome =
  | Extract<PushOutcome<VersionRecord>, { readonly kind: "refused" | "existing" | "version-taken" | "upload-missing" | "upload-used" }>
  | { readonly kind: "created"; readonly version: VersionRecord }
  | { readonly kind: "stale"; readonly tip: VersionRecord | undefined }
  /** Only for a confirm that may not create: the locked decision was a creation; decide again from the start. */
  | { readonly kind: "changed" };

/** A push decided from a plain read, before any lock: what the endpoints answer early. */
export interface PushPrecheck {
  readonly outcome: PushOutcome<VersionRecord>;
  /** Whether the entity had a row (it has one from its first push on). */
  readonly entityExists: boolean;
  /** The tip, read only when the outcome is "stale" (the STALE_BASE answer carries it). */
  readonly tip: VersionRecord | undefined;
}

/** How a delete ended; "deleted" names the upload whose blobs are now to be deleted. */
export type DeleteOutcome =
  | RefusedChange
  | { readonly kind: "deleted"; readonly uploadId: string; readonly versionId: string }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "version-missing" }
  | { readonly kind: "active" };

/** What SetActiveVersion asks the store to do. */
export interface SetActiveRequest {
  readonly entityId: string;
  readonly versionId: string;
  /**
   * Compare-and-set: make the change only if this is the active version
   * ("" for none) under the entity lock; undefined: no condition.
   */
  readonly expectedActiveVersionId: string | undefined;
  /** Who asks and when: what the event records. */
  readonly change: ChangeContext;
  /** The caller's right to activate, decided again under the entity's lock. */
  readonly authorization: ChangeAuthorization;
  readonly signal?: AbortSignal | undefined;
}

/** How a set-active ended; "active-changed": the compare-and-set failed, with the active version now. */
export type SetActiveOutcome =
  | RefusedChange
  | { readonly kind: "set"; readonly version: VersionRecord }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "version-missing" }
  | { readonly kind: "active-changed"; readonly current: VersionRecord | undefined };

/** A version looked up by id, or why there is none. */
export type VersionLookup =
  | { readonly kind: "found"; readonly version: VersionRecord }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "version-missing" };

/** A version by id, or why there is none, with the caller's access facts. */
export type VersionLookupWithFacts = VersionLookup & { readonly facts: AccessFacts };

/** A page of versions, or a missing entity, with the caller's access facts. */
export type VersionPageWithFacts = VersionPage & { readonly facts: AccessFacts };

/** The active version, or why there is none, with the caller's access facts. */
export type ActiveLookup = { readonly facts: AccessFacts } & (
  | { readonly kind: "found"; readonly version: VersionRecord }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "none-active" }
);

/** One page of an entity's versions, newest first. */
export type VersionPage =
  | { readonly kind: "page"; readonly versions: readonly VersionRecord[]; readonly hasMore: boolean }
  | { readonly kind: "entity-missing" };

interface VersionRow {
  id: string;
  entity_id: string;
  seq: number | string;
  version: string;
  source_hash: string;
  upload_id: string;
  storage_path: string;
  file_size_bytes: number | string;
  package_md5: string | null;
  package_lock_path: string | null;
  service_dependencies: string;
  package_json: string | null;
  base_version_id: string | null;
  published_by: string;
  created_at: Date | number | string;
  active_version_id: string | null;
}

interface EntityRow {
  id: string;
  tip_version_id: string | null;
  active_version_id: string | null;
  last_seq: number | string;
  last_event_seq: number | string;
}

/**
 * A version from its row. Its package_json is parsed when first read, not
 * here: a read's rows come back with the caller's access facts, and a
 * caller refused on them must not cost the parse of every manifest on the
 * page (nor be able to time it).
 */
function toRecord(row: VersionRow): VersionRecord {
  let packageJson: { value: JsonObject | undefined } | undefined;
  return {
    id: row.id,
    entityId: row.entity_id,
    seq: Number(row.seq),
    version: row.version,
    sourceHash: row.source_hash,
    uploadId: row.upload_id,
    storagePath: row.storage_path,
    fileSizeBytes: Number(row.file_size_bytes),
    packageMd5: row.package_md5 ?? undefined,
    packageLockPath: row.package_lock_path ?? undefined,
    serviceDependencies: JSON.parse(row.service_dependencies) as string[],
    get packageJson() {
      packageJson ??= { value: row.package_json === null ? undefined : (JSON.parse(row.package_json) as JsonObject) };
      return packageJson.value;
    },
    baseVersionId: row.base_version_id ?? undefined,
    publishedBy: row.published_by,
    createdAt: new Date(row.created_at),
    isActive: row.active_version_id === row.id,
  };
}

/** The versions row a confirm inserts. */
function versionRow(input: NewVersion, seq: number): Record<string, unknown> {
  const dependencies = JSON.stringify(input.serviceDependencies);
  const packageJson = input.packageJson === undefined ? null : JSON.stringify(input.packageJson);
  return {
    id: input.id,
    entity_id: input.entityId,
    seq,
    version: input.version,
    source_hash: input.sourceHash,
    upload_id: input.uploadId,
    storage_path: input.storagePath,
    file_size_bytes: input.fileSizeBytes,
    package_md5: input.packageMd5 ?? null,
    package_lock_path: input.packageLockPath ?? null,
    service_dependencies: dependencies,
    package_json: packageJson,
    // What a page of ListVersions counts against its budget.
    data_cost: versionDataCost({ serviceDependencies: dependencies, packageJson }, input.serviceDependencies, input.packageJson),
    base_version_id: input.baseVersionId === "" ? null : input.baseVersionId,
    published_by: input.caller.id,
    created_at: input.now,
  };
}

/**
 * The events of a confirm that creates a version: a first push's claim of
 * the entity, the version, and its activation when set_as_active asks.
 */
function creationEvents(input: NewVersion, claim: boolean, previousActiveVersionId: string | null): NewEvent[] {
  return [
    ...(claim ? [{ type: "ACCESS_CHANGED", accessKind: "PUBLISHER_ADDED", subject: input.caller.id } as const] : []),
    { type: "VERSION_CREATED", versionId: input.id, version: input.version },
    ...(input.setAsActive
      ? [{ type: "ACTIVE_VERSION_CHANGED", versionId: input.id, version: input.version, previousActiveVersionId: previousActiveVersionId ?? undefined } as const]
      : []),
  ];
}

/** The record of a version a confirm created, as the row just inserted reads back. */
function createdVersion(input: NewVersion, seq: number): VersionRecord {
  return {
    id: input.id,
    entityId: input.entityId,
    seq,
    version: input.version,
    sourceHash: input.sourceHash,
    uploadId: input.uploadId,
    storagePath: input.storagePath,
    fileSizeBytes: input.fileSizeBytes,
    packageMd5: input.packageMd5,
    packageLockPath: input.packageLockPath,
    serviceDependencies: input.serviceDependencies,
    packageJson: input.packageJson,
    baseVersionId: input.baseVersionId === "" ? undefined : input.baseVersionId,
    publishedBy: input.caller.id,
    createdAt: input.now,
    isActive: input.setAsActive,
  };
}

/** The row a push is decided from: the entity, the caller's access, and the ids of the versions that matter. */
interface PushFactsRow extends AccessFactRow {
  /** The entity's id when it has a row; null before its first push. */
  entity_found: string | null;
  tip_version_id: string | null;
  active_version_id: string | null;
  last_seq: number | string;
  duplicate_id: string | null;
  taken_id: string | null;
  upload_version_id: string | null;
  upload_state: string | null;
  upload_activated_id: string | null;
}

/** Who confirms and when: what a confirm's events record. */
function changeOf(input: NewVersion): ChangeContext {
  return { actor: input.caller.id, at: input.now };
}

/** The intent of a push, as the decision reads it. */
function intentOf(push: PushRequest): PushIntent {
  return {
    step: push.uploadId === undefined ? "upload-url" : "confirm",
    baseVersionId: push.baseVersionId,
    force: push.force,
    setAsActive: push.setAsActive,
    version: push.version,
    sourceHash: push.sourceHash,
    fileSizeBytes: push.fileSizeBytes,
  };
}

/** Rows changed by a raw UPDATE or DELETE on MySQL (mysql2 answers [ResultSetHeader, undefined]). */
function rawAffected(result: unknown): number {
  return Number((Array.isArray(result) ? (result[0] as { affectedRows?: number }) : undefined)?.affectedRows ?? Number.NaN);
}

function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string; errno?: number };
  return e.code === "ER_DUP_ENTRY" || e.errno === 1062 || e.code === "SQLITE_CONSTRAINT_UNIQUE";
}

/** A signal that aborts once any of these does; undefined when there are none. */
function anyAborted(signals: ReadonlyArray<AbortSignal | undefined>): AbortSignal | undefined {
  const given = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  return given.length === 0 ? undefined : AbortSignal.any(given);
}

/**
 * Longest a confirm waits for the group transaction in flight before it
 * goes anyway: that transaction is stuck (on a first push's lock, say).
 * The choice of 20 ms is recorded in docs/performance.md.
 */
const confirmGroupWaitMs = 20;

/**
 * The uploads issued to `issuedTo` on an entity and not yet confirmed (nor
 * swept): what MAX_OPEN_UPLOADS_PER_ENTITY bounds, read by the
 * (entity_id, state, issued_to) index.
 */
export function openUploadsQuery(knex: Knex, entityId: string, issuedTo: string): Knex.QueryBuilder {
  return knex("uploads").where({ entity_id: entityId, state: "issued", issued_to: issuedTo });
}

/**
 * Versions, entities and uploads in SQL, through Knex, the same code on MySQL
 * and SQLite. Every query is scoped by entity id (the future shard key).
 * Every change takes the entity row's lock (SELECT … FOR UPDATE) first and
 * decides under it, in one transaction, so concurrent pushes on one entity
 * serialise and pushes on different entities never wait on each other.
 * Every push is decided by decidePush, from the same facts, read by the
 * same statement (pushFactsSql): before any lock to answer early, and again
 * under the lock to write.
 */
export class VersionStore {
  readonly #knex: Knex;
  readonly #pageMaxBytes: number;
  readonly #dialect: Dialect;
  /** The single-entity reads (the three gets, lists and the push pre-check), batched where round trips cost (MySQL). */
  readonly #batched: RunBatched;
  /** Confirms, grouped where round trips cost (MySQL). */
  readonly #confirm: (input: NewVersion) => Promise<ConfirmOutcome>;
  /** Told the entities whose events a transaction committed. */
  readonly #recorded: (entityIds: readonly string[]) => void;

  constructor(
    db: Database,
    options: {
      readonly onReadBatch?: (reads: number) => void;
      readonly onConfirmGroup?: (size: number, recorded: number) => void;
      /** Called once a transaction that recorded events of these entities has committed (the event hub's prompt). */
      readonly onEventsRecorded?: (entityIds: readonly string[]) => void;
      /** What a page of versions may cost to serve (versionDataCost), at most (always one version at least). */
      readonly pageMaxBytes?: number;
    } = {},
  ) {
    this.#knex = db.knex;
    this.#pageMaxBytes = options.pageMaxBytes ?? defaultPageMaxBytes;
    this.#dialect = db.dialect;
    this.#recorded = options.onEventsRecorded ?? (() => undefined);
    const prepared = preparedRunner(db);
    this.#batched = db.readBatchMax > 1 ? readBatcher(prepared, { maxBatch: db.readBatchMax, onBatch: options.onReadBatch }) : prepared;
    this.#confirm =
      db.confirmGroupMax > 1
        ? confirmGrouper<NewVersion, ConfirmOutcome>({
            alone: (input) => this.#confirmAlone(input),
            released: (input) => this.#confirmAfterRecheck(input),
            together: (inputs) => this.#confirmTogether(inputs),
            groupable: (input) => input.entityExisted !== undefined && input.mayCreate,
            maxGroup: db.confirmGroupMax,
            maxWaitMs: confirmGroupWaitMs,
            onGroup: options.onConfirmGroup,
          })
        : (input) => this.#confirmAlone(input);
  }

  async #versionById(q: Knex | Knex.Transaction, entityId: string, versionId: string): Promise<VersionRecord | undefined> {
    const row = await q({ v: "versions" })
      .join({ e: "entities" }, "e.id", "v.entity_id")
      .select<VersionRow[]>(versionColumns)
      .where("v.entity_id", entityId)
      .andWhere("v.id", versionId)
      .first();
    return row === undefined ? undefined : toRecord(row);
  }

  /** One version by id, through the batched reads. */
  async #versionByIdBatched(entityId: string, versionId: string, signal: AbortSignal | undefined): Promise<VersionRecord | undefined> {
    const q = versionByIdSql(entityId, versionId);
    const [found] = await this.#batched<VersionRow>(q.text, q.params, signal);
    return found === undefined ? undefined : toRecord(found);
  }

  /** The entity row, locked until the transaction ends: the tip every decision under it reads. */
  async #lockEntity(trx: Knex.Transaction, entityId: string): Promise<EntityRow | undefined> {
    return trx<EntityRow>("entities").where("id", entityId).forUpdate().first("id", "tip_version_id", "active_version_id", "last_seq", "last_event_seq");
  }

  /**
   * Decides a push from its facts row (undefined: no entity row), reading
   * the versions the decision names with `byId` (rare paths: a duplicate,
   * a taken version string, a retried confirm).
   */
  async #decide(
    row: PushFactsRow | undefined,
    push: PushRequest,
    tipVersionId: string | null | undefined,
    byId: (id: string) => Promise<VersionRecord | undefined>,
  ): Promise<PushOutcome<VersionRecord>> {
    const read = (id: string | null | undefined) => (id === null || id === undefined ? Promise.resolve(undefined) : byId(id));
    const [duplicate, versionTaken, uploadVersion] = await Promise.all([read(row?.duplicate_id), read(row?.taken_id), read(row?.upload_version_id)]);
    const facts: PushFacts<VersionRecord> = {
      access: push.authorize(toAccessFacts(row), tipVersionId !== null && tipVersionId !== undefined),
      tipVersionId: tipVersionId ?? undefined,
      duplicate,
      versionTaken,
      uploadVersion,
      uploadIssued: row?.upload_state === "issued",
      uploadActivatedId: row?.upload_activated_id ?? undefined,
    };
    return decidePush(facts, intentOf(push));
  }

  /**
   * Decides a push from one plain (batched) read, with decidePush: both
   * push endpoints answer from it at once unless it is a write, and a
   * confirm that waited behind another on its entity is decided again by
   * it. A write (a creation, an activation) is decided again under the
   * entity lock by confirm.
   */
  async precheck(push: PushRequest): Promise<PushPrecheck> {
    const q = pushFactsSql(push);
    const [row] = await this.#batched<PushFactsRow>(q.text, q.params, push.signal);
    const byId = (id: string) => this.#versionByIdBatched(push.entityId, id, push.signal);
    const outcome = await this.#decide(row, push, row?.tip_version_id, byId);
    const tip = outcome.kind === "stale" && row?.tip_version_id ? await byId(row.tip_version_id) : undefined;
    return { outcome, entityExists: row?.entity_found != null, tip };
  }

  /**
   * Records an upload issued to the caller `issuedTo` (a user id), so that
   * confirm accepts its paths and the sweeper can find it; false,
   * recording nothing, when that caller already has `maxOpen` issued and
   * not confirmed on the entity. Counted per caller, not per entity: any
   * publisher may ask for upload URLs for an id no one has claimed yet (or
   * be refused only at confirm), and counted per entity those would fill
   * the quota of its rightful first push, or of its owner. Uploads recorded
   * before issued_to existed count for nobody. Counted, then inserted,
   * outside a transaction: calls racing at the bound may pass it by as many
   * as run at once, which a bound against runaway clients can afford.
   */
  async recordUpload(entityId: string, uploadId: string, issuedTo: string, now: Date, maxOpen: number, signal?: AbortSignal): Promise<boolean> {
    const open = await untilAborted(countUpTo(this.#knex, openUploadsQuery(this.#knex, entityId, issuedTo), maxOpen), signal);
    if (open >= maxOpen) return false;
    await untilAborted(
      Promise.resolve(this.#knex("uploads").insert({ id: uploadId, entity_id: entityId, state: "issued", issued_to: issuedTo, created_at: now, attempts: 0 })),
      signal,
    );
    return true;
  }

  /**
   * Records a version, or activates the existing one it is answered with:
   * alone, or together with confirms on other entities that arrived at the
   * same time (MySQL; see confirmGrouper), which answers exactly as alone.
   */
  confirm(input: NewVersion): Promise<ConfirmOutcome> {
    return untilAborted(this.#confirm(input), input.signal);
  }

  /**
   * Decides and writes one confirm in one transaction: locks the entity row
   * (SELECT … FOR UPDATE; a first push makes the row first, and a refused
   * one rolls it back), reads the push's facts under the lock, decides with
   * decidePush, then claims the upload, inserts the version and moves the
   * tip (and the active pointer when asked), or activates the existing
   * version it answers with. Two confirms on one base serialise on the
   * lock, so the second sees the first's tip and is stale.
   */
  async #confirmAlone(input: NewVersion): Promise<ConfirmOutcome> {
    const outcome = await inTransaction<ConfirmOutcome>(
      this.#knex,
      async (trx) => {
      let entity = input.entityExisted === true ? await this.#lockEntity(trx, input.entityId) : undefined;
      if (entity === undefined) {
        // Made and locked by the insert (or found and locked by its
        // update); a FOR UPDATE on a missing row would take gap locks that
        // deadlock racing first pushes.
        await trx("entities").insert({ id: input.entityId, last_seq: 0, created_at: input.now }).onConflict("id").merge(["id"]);
        entity = (await this.#lockEntity(trx, input.entityId))!;
      }
      // The first plain read of the transaction: its snapshot starts with
      // the lock held, so it sees every change to this entity.
      const q = pushFactsSql(input);
      const [row] = rawRows<PushFactsRow>(await trx.raw(q.text, q.params as never));
      const outcome = await this.#decide(row, input, entity.tip_version_id, (id) => this.#versionById(trx, input.entityId, id));
      return this.#apply(trx, input, entity, outcome);
      },
      { signal: input.signal, onEventsCommitted: this.#recorded },
    );
    return outcome;
  }

  /** Carries out a decision made under the entity lock: whether to commit, and the answer. */
  async #apply(
    trx: Knex.Transaction,
    input: NewVersion,
    entity: EntityRow,
    outcome: PushOutcome<VersionRecord>,
  ): Promise<{ commit: boolean; result: ConfirmOutcome }> {
    switch (outcome.kind) {
      case "create": {
        if (!input.mayCreate) return { commit: false, result: { kind: "changed" } };
        // Only an "issued" upload of this entity turns "confirmed": the
        // sweeper's conditional update may have taken it meanwhile.
        const claimed = await trx("uploads").where({ id: input.uploadId, entity_id: input.entityId, state: "issued" }).update({ state: "confirmed" });
        if (claimed !== 1) return { commit: false, result: { kind: "upload-missing" } };
        const seq = Number(entity.last_seq) + 1;
        try {
          await trx("versions").insert(versionRow(input, seq));
        } catch (error) {
          if (!isUniqueViolation(error)) throw error;
          const taken = await trx<{ id: string }>("versions").where("entity_id", input.entityId).andWhere("version", input.version).first("id");
          const existing = taken === undefined ? undefined : await this.#versionById(trx, input.entityId, taken.id);
          if (existing === undefined) throw error;
          return { commit: false, result: { kind: "version-taken", existing } };
        }
        if (outcome.claim) await trx("entity_publishers").insert({ entity_id: input.entityId, user_id: input.caller.id });
        await recordEvents(trx, entity, changeOf(input), creationEvents(input, outcome.claim, entity.active_version_id), {
          tip_version_id: input.id,
          last_seq: seq,
          ...(input.setAsActive ? { active_version_id: input.id } : {}),
        });
        return { commit: true, result: { kind: "created", version: createdVersion(input, seq) } };
      }
      case "existing": {
        if (!outcome.activate) return { commit: false, result: outcome };
        const { version } = outcome;
        // The activation uses the upload up: its retry answers the same and
        // activates nothing, and once the duplicate is deleted, creates
        // nothing either. Only an "issued" upload: the sweeper's conditional
        // update may have taken it since the facts were read.
        const claimed = await trx("uploads")
          .where({ id: input.uploadId, entity_id: input.entityId, state: "issued" })
          .update({ state: "confirmed", activated_version_id: version.id });
        if (claimed !== 1) return { commit: false, result: { kind: "upload-missing" } };
        await recordEvents(
          trx,
          entity,
          changeOf(input),
          [{ type: "ACTIVE_VERSION_CHANGED", versionId: version.id, version: version.version, previousActiveVersionId: entity.active_version_id ?? undefined }],
          { active_version_id: version.id },
        );
        return { commit: true, result: { ...outcome, version: { ...version, isActive: true } } };
      }
      case "stale": {
        const tip = entity.tip_version_id === null ? undefined : await this.#versionById(trx, input.entityId, entity.tip_version_id);
        return { commit: false, result: { kind: "stale", tip } };
      }
      default:
        return { commit: false, result: outcome };
    }
  }

  /**
   * Decides a confirm again with precheck before taking the entity's lock;
   * only one that will write goes on to #confirmAlone. Used for confirms
   * that waited for another on their entity: of many racing on one base,
   * all but one are stale once it landed, and need not each queue for the
   * lock to learn it.
   */
  async #confirmAfterRecheck(input: NewVersion): Promise<ConfirmOutcome> {
    const { outcome, tip } = await this.precheck(input);
    switch (outcome.kind) {
      case "create":
        return this.#confirmAlone(input);
      case "existing":
        return outcome.activate ? this.#confirmAlone(input) : outcome;
      case "stale":
        return { kind: "stale", tip };
      default:
        return outcome;
    }
  }

  /**
   * Records several confirms, each on a different entity, in one
   * transaction of about seven statements in all (MySQL only), and leaves
   * to #confirmAlone every confirm that is not a plain creation. The same
   * steps as alone, each done for the whole group at once:
   *
   * 1. Lock the entities: a first push's row is inserted (its lock comes
   *    with it); rows that exist are locked with SELECT … FOR UPDATE SKIP
   *    LOCKED, reading their tips, so that an entity another transaction
   *    holds never makes the group, and the pushes to other entities in it,
   *    wait: its confirm goes alone.
   * 2. Read, under the locks, each one's push facts (pushFactsSql): one
   *    UNION ALL statement.
   * 3. Decide each with decidePush and keep the creations. A first push's
   *    row inserted for a confirm not kept is deleted again, so that a
   *    refused push leaves no trace.
   * 4. Claim every kept confirm's upload with one conditional UPDATE. If
   *    it claimed fewer than all (an upload swept, used or of another
   *    entity), the whole group rolls back and each is decided alone.
   * 5. Insert the versions and the claims' publishers, move the tips (and
   *    active pointers), commit.
   *
   * Throws when the group failed; nothing of it is then written, unless
   * the connection was lost after its COMMIT was sent
   * (CommitOutcomeUnknownError: all of it may have been).
   */
  async #confirmTogether(inputs: readonly NewVersion[]): Promise<Array<ConfirmOutcome | undefined>> {
    const outcomes: Array<ConfirmOutcome | undefined> = inputs.map(() => undefined);
    const placeholders = (n: number) => Array<string>(n).fill("?").join(", ");
    // Every statement takes its rows in entity id order, so that two groups
    // (on two replicas, say) lock in the same order and cannot deadlock.
    const sorted = inputs.map((input, index) => ({ input, index })).sort((a, b) => (a.input.entityId < b.input.entityId ? -1 : 1));
    await inTransaction<void>(
      this.#knex,
      async (trx) => {
        const firstPushes = sorted.filter((c) => c.input.entityExisted !== true).map((c) => c.input);
        const existing = sorted.filter((c) => c.input.entityExisted === true).map((c) => c.input.entityId);
        const locked = new Map<string, EntityRow>();
        if (firstPushes.length > 0) {
          await trx("entities").insert(firstPushes.map((i) => ({ id: i.entityId, last_seq: 0, created_at: i.now })));
          for (const i of firstPushes) locked.set(i.entityId, { id: i.entityId, tip_version_id: null, active_version_id: null, last_seq: 0, last_event_seq: 0 });
        }
        if (existing.length > 0) {
          // FORCE INDEX: on a small table the optimizer may prefer a scan,
          // which would lock every row it reads, other entities' too.
          const rows = rawRows<EntityRow>(
            await trx.raw(
              `select id, tip_version_id, active_version_id, last_seq, last_event_seq from entities force index (primary) where id in (${placeholders(existing.length)}) for update skip locked`,
              existing,
            ),
          );
          for (const r of rows) locked.set(r.id, r);
        }
        const candidates = sorted.filter((c) => locked.has(c.input.entityId));
        if (candidates.length === 0) return { commit: false, result: undefined };

        // The first plain read of the transaction, so its snapshot starts
        // after every lock is held, as alone.
        const read = joinSql(
          candidates.map(({ input }, part) => sql`(${pushFactsSql(input, sql`${part} as group_part, `)})`),
          " union all ",
        );
        const rows = rawRows<PushFactsRow & { group_part: number | string }>(await trx.raw(read.text, read.params as never));

        const creating: Array<{ input: NewVersion; index: number; seq: number; claim: boolean; entity: EntityRow }> = [];
        for (const row of rows) {
          const { input, index } = candidates[Number(row.group_part)]!;
          const entity = locked.get(input.entityId)!;
          // Only "create" is acted on here; the versions a decision names
          // matter only to answers, which are made alone (and no decision
          // that names a version is a creation, whatever its fields).
          const named = (id: string | null) =>
            id === null ? undefined : { id, isActive: id === entity.active_version_id, version: "", sourceHash: "", fileSizeBytes: 0 };
          const outcome = decidePush(
            {
              access: input.authorize(toAccessFacts(row), entity.tip_version_id !== null),
              tipVersionId: entity.tip_version_id ?? undefined,
              duplicate: named(row.duplicate_id),
              versionTaken: named(row.taken_id),
              uploadVersion: named(row.upload_version_id),
              uploadIssued: row.upload_state === "issued",
              uploadActivatedId: row.upload_activated_id ?? undefined,
            },
            intentOf(input),
          );
          if (outcome.kind === "create") creating.push({ input, index, seq: Number(entity.last_seq) + 1, claim: outcome.claim, entity });
        }
        if (creating.length === 0) return { commit: false, result: undefined };
        // A union's rows come in no set order.
        creating.sort((a, b) => (a.input.entityId < b.input.entityId ? -1 : 1));
        const kept = new Set(creating.map((c) => c.index));
        const refusedFirstPushes = candidates.filter((c) => !kept.has(c.index) && c.input.entityExisted !== true).map((c) => c.input.entityId);
        if (refusedFirstPushes.length > 0) {
          await trx.raw(
            `delete e from entities e force index (primary) where e.id in (${placeholders(refusedFirstPushes.length)}) and e.last_seq = 0`,
            refusedFirstPushes,
          );
        }

        // Claims every upload, each only if it is this entity's and still
        // "issued" (the sweeper marks abandoned ones "deleting"); if any is
        // not, the group rolls back and each is decided alone.
        const claim = sql`update uploads force index (primary) set state = 'confirmed' where state = 'issued' and (${joinSql(
          creating.map((c) => sql`(id = ${c.input.uploadId} and entity_id = ${c.input.entityId})`),
          " or ",
        )})`;
        const claimed = rawAffected(await trx.raw(claim.text, claim.params as never));
        if (claimed !== creating.length) return { commit: false, result: undefined };

        await trx("versions").insert(creating.map((c) => versionRow(c.input, c.seq)));
        const claims = creating.filter((c) => c.claim);
        if (claims.length > 0) await trx("entity_publishers").insert(claims.map((c) => ({ entity_id: c.input.entityId, user_id: c.input.caller.id })));
        // Each confirm's events, in the same transaction, as alone.
        const events = creating.map((c) =>
          numberEvents(c.input.entityId, Number(c.entity.last_event_seq), changeOf(c.input), creationEvents(c.input, c.claim, c.entity.active_version_id)),
        );
        await insertEvents(
          trx,
          events.flatMap((e) => e.rows),
        );
        const caseOf = (pairs: readonly Sql[]) => joinSql(pairs, " ");
        const activated = creating.filter((c) => c.input.setAsActive);
        const move = sql`update entities force index (primary) set tip_version_id = case id ${caseOf(
          creating.map((c) => sql`when ${c.input.entityId} then ${c.input.id}`),
        )} end, last_seq = case id ${caseOf(creating.map((c) => sql`when ${c.input.entityId} then ${c.seq}`))} end, last_event_seq = case id ${caseOf(
          creating.map((c, i) => sql`when ${c.input.entityId} then ${events[i]!.lastEventSeq}`),
        )} end${
          activated.length === 0
            ? rawSql("")
            : sql`, active_version_id = case id ${caseOf(activated.map((c) => sql`when ${c.input.entityId} then ${c.input.id}`))} else active_version_id end`
        } where id in (${joinSql(
          creating.map((c) => sql`${c.input.entityId}`),
          ", ",
        )})`;
        await trx.raw(move.text, move.params as never);
        for (const c of creating) outcomes[c.index] = { kind: "created", version: createdVersion(c.input, c.seq) };
        return { commit: true, result: undefined };
      },
      // A deadlock or lock wait is not retried as a group: each confirm is
      // then decided alone, which retries on its own. Nor does a group
      // outlive the deadline of any of its confirms: one answered
      // DEADLINE_EXCEEDED is never committed after that answer, so the
      // group rolls back and the others are decided alone.
      { attempts: 1, signal: anyAborted(inputs.map((input) => input.signal)), onEventsCommitted: this.#recorded },
    );
    return outcomes;
  }

  /** The active version and the caller's access to the entity: one prepared query. */
  async getActive(entityId: string, caller: Caller, signal?: AbortSignal): Promise<ActiveLookup> {
    const q = activeVersionSql(entityId, caller);
    const [row] = await this.#batched<VersionRow & AccessFactRow>(q.text, q.params, signal);
    const access = toAccessFacts(row);
    if (row === undefined) return { kind: "entity-missing", facts: access };
    if (row.id === null) return { kind: "none-active", facts: access };
    return { kind: "found", version: toRecord(row), facts: access };
  }

  /** A version by id and the caller's access to its entity: one prepared query. */
  async getVersionWithFacts(entityId: string, versionId: string, caller: Caller, signal?: AbortSignal): Promise<VersionLookupWithFacts> {
    const q = versionWithFactsSql(entityId, versionId, caller);
    const [row] = await this.#batched<VersionRow & AccessFactRow>(q.text, q.params, signal);
    const access = toAccessFacts(row);
    if (row === undefined) return { kind: "entity-missing", facts: access };
    if (row.id === null) return { kind: "version-missing", facts: access };
    return { kind: "found", version: toRecord(row), facts: access };
  }

  /** A page of versions, newest first, and the caller's access: one prepared query (versionPageSql). */
  async listVersionsWithFacts(
    entityId: string,
    beforeSeq: number | undefined,
    limit: number,
    caller: Caller,
    signal?: AbortSignal,
  ): Promise<VersionPageWithFacts> {
    const q = versionPageSql(entityId, beforeSeq, limit, caller, this.#pageMaxBytes, this.#dialect);
    const rows = await this.#batched<VersionRow & AccessFactRow & { page_rows: number | string | null }>(q.text, q.params, signal);
    const access = toAccessFacts(rows[0]);
    if (rows.length === 0) return { kind: "entity-missing", facts: access };
    // Sorted here: a batched read's rows come back in no set order.
    const page = rows.filter((r) => r.id !== null).sort((a, b) => Number(b.seq) - Number(a.seq));
    // More follow when the read found more rows than the page holds: past
    // the page size, or past the byte budget.
    return { kind: "page", versions: page.map(toRecord), hasMore: Number(rows[0]!.page_rows ?? 0) > page.length, facts: access };
  }

  /**
   * Makes a version active under the entity lock, if the caller may still
   * activate there, recording the change;
   * already active is a no-op. With an expected active version
   * (compare-and-set), refuses when another one is active, deciding under
   * the same lock, so of two racing activations that expect the same
   * version exactly one wins.
   */
  async setActive(request: SetActiveRequest): Promise<SetActiveOutcome> {
    const { entityId, versionId, expectedActiveVersionId } = request;
    return inTransaction<SetActiveOutcome>(this.#knex, async (trx) => {
      const entity = await this.#lockEntity(trx, entityId);
      if (entity === undefined) return { commit: false, result: { kind: "entity-missing" } };
      const refused = await refusedUnderLock(trx, entityId, request.authorization);
      if (refused !== undefined) return { commit: false, result: refused };
      const version = await this.#versionById(trx, entityId, versionId);
      if (version === undefined) return { commit: false, result: { kind: "version-missing" } };
      const active = entity.active_version_id ?? "";
      // Already the active one: nothing to change, whatever was expected,
      // so that a compare-and-set retried after its answer was lost (a
      // deadline, a cut connection) succeeds rather than report its own
      // change as another's.
      if (active === versionId) return { commit: false, result: { kind: "set", version } };
      if (expectedActiveVersionId !== undefined && expectedActiveVersionId !== active) {
        const current = active === "" ? undefined : await this.#versionById(trx, entityId, active);
        return { commit: false, result: { kind: "active-changed", current } };
      }
      await recordEvents(
        trx,
        entity,
        request.change,
        [{ type: "ACTIVE_VERSION_CHANGED", versionId, version: version.version, previousActiveVersionId: entity.active_version_id ?? undefined }],
        { active_version_id: versionId },
      );
      return { commit: true, result: { kind: "set", version: { ...version, isActive: true } } };
    }, { signal: request.signal, onEventsCommitted: this.#recorded });
  }

  /**
   * Deletes a version that is not active, if `authorization` still allows
   * it under the entity's lock, in one transaction: removes the
   * record, moves the tip back to the newest remaining version when the tip
   * goes, and marks the upload "deleting" so its blobs are deleted, now or
   * by a later retry, but never forgotten.
   */
  async deleteVersion(
    entityId: string,
    versionId: string,
    change: ChangeContext,
    authorization: ChangeAuthorization,
    signal?: AbortSignal,
  ): Promise<DeleteOutcome> {
    return inTransaction<DeleteOutcome>(this.#knex, async (trx) => {
      const entity = await this.#lockEntity(trx, entityId);
      if (entity === undefined) return { commit: false, result: { kind: "entity-missing" } };
      const refused = await refusedUnderLock(trx, entityId, authorization);
      if (refused !== undefined) return { commit: false, result: refused };
      const version = await trx<{ id: string; upload_id: string; version: string }>("versions")
        .where("entity_id", entityId)
        .andWhere("id", versionId)
        .first("id", "upload_id", "version");
      if (version === undefined) return { commit: false, result: { kind: "version-missing" } };
      if (entity.active_version_id === versionId) return { commit: false, result: { kind: "active" } };
      await trx("versions").where("entity_id", entityId).andWhere("id", versionId).delete();
      await trx("uploads")
        .where({ entity_id: entityId, id: version.upload_id })
        .update({ state: "deleting", next_attempt_at: change.at, attempts: 0, version_id: versionId });
      const tipUpdate: Record<string, unknown> = {};
      if (entity.tip_version_id === versionId) {
        const next = await trx<{ id: string }>("versions").where("entity_id", entityId).orderBy("seq", "desc").first("id");
        tipUpdate["tip_version_id"] = next?.id ?? null;
      }
      await recordEvents(trx, entity, change, [{ type: "VERSION_DELETED", versionId, version: version.version }], tipUpdate);
      return { commit: true, result: { kind: "deleted", uploadId: version.upload_id, versionId } };
    }, { signal, onEventsCommitted: this.#recorded });
  }
}

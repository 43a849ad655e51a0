import type { Knex } from "knex";
import type { Caller } from "../auth/caller.js";
import type { AccessFacts, Decision } from "../auth/policy.js";
import { decidePush } from "../domain/push-rules.js";
import { type AccessFactRow, accessFactsSql, toAccessFacts } from "./access-store.js";
import { confirmGrouper } from "./confirm-grouper.js";
import type { Database } from "./database.js";
import { preparedRunner } from "./prepared.js";
import { readBatcher, type RunBatched } from "./read-batcher.js";
import { nextPowerOfTwo } from "./statement-shapes.js";
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

/** What ConfirmUpload asks the store to record. */
export interface NewVersion {
  readonly id: string;
  readonly entityId: string;
  readonly version: string;
  readonly sourceHash: string;
  readonly uploadId: string;
  readonly storagePath: string;
  readonly fileSizeBytes: number;
  readonly packageMd5: string | undefined;
  readonly packageLockPath: string | undefined;
  readonly serviceDependencies: readonly string[];
  readonly packageJson: JsonObject | undefined;
  /** The base the client named; "" when none. */
  readonly baseVersionId: string;
  readonly caller: Caller;
  /** Decides, from the caller's access facts read under the entity lock, whether the push may go on. */
  readonly authorize: (facts: AccessFacts) => Decision;
  readonly setAsActive: boolean;
  readonly force: boolean;
  readonly now: Date;
  /**
   * Whether the entity existed when the push's pre-check read it. Only a
   * hint for grouping concurrent confirms (the transaction decides again
   * under the lock); a confirm without it is never grouped.
   */
  readonly entityExisted?: boolean | undefined;
}

/** How a confirm ended; only "created" wrote anything. */
export type ConfirmOutcome =
  | { readonly kind: "hidden" | "forbidden" }
  | { readonly kind: "created"; readonly version: VersionRecord }
  | { readonly kind: "existing"; readonly version: VersionRecord }
  | { readonly kind: "stale"; readonly tip: VersionRecord | undefined }
  | { readonly kind: "version-taken"; readonly existing: VersionRecord }
  | { readonly kind: "upload-missing" }
  | { readonly kind: "upload-used"; readonly versionId: string };

/** What a push decided from a plain read: go on to the transaction, or an answer already. */
export type PushPrecheck =
  | { readonly kind: "proceed"; readonly entityExists: boolean }
  | Extract<ConfirmOutcome, { readonly kind: "hidden" | "forbidden" | "existing" | "stale" | "version-taken" }>;

/** What a push needs to know before it goes on, read in one query. */
interface PushCheck {
  readonly facts: AccessFacts;
  /** Whether the entity had a row (it has one from its first push on). */
  readonly entityExists: boolean;
  readonly tipVersionId: string | undefined;
  /** The newest version with the pushed source hash. */
  readonly duplicate: VersionRecord | undefined;
  /** The version that already has the pushed version string. */
  readonly versionTaken: VersionRecord | undefined;
  /** Reads the tip, for a STALE_BASE answer. */
  tip(): Promise<VersionRecord | undefined>;
}

/** How a delete ended; "deleted" names the upload whose blobs are now to be deleted. */
export type DeleteOutcome =
  | { readonly kind: "deleted"; readonly uploadId: string }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "version-missing" }
  | { readonly kind: "active" };

/** How a set-active ended. */
export type SetActiveOutcome =
  | { readonly kind: "set"; readonly version: VersionRecord }
  | { readonly kind: "entity-missing" }
  | { readonly kind: "version-missing" };

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
}

const versionColumns = [
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

/** The same columns as SQL text, for the prepared reads. */
const versionColumnsSql = versionColumns.join(", ");

function toRecord(row: VersionRow): VersionRecord {
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
    packageJson: row.package_json === null ? undefined : (JSON.parse(row.package_json) as JsonObject),
    baseVersionId: row.base_version_id ?? undefined,
    publishedBy: row.published_by,
    createdAt: new Date(row.created_at),
    isActive: row.active_version_id === row.id,
  };
}

/** The versions row a confirm inserts. */
function versionRow(input: NewVersion, seq: number): Record<string, unknown> {
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
    service_dependencies: JSON.stringify(input.serviceDependencies),
    package_json: input.packageJson === undefined ? null : JSON.stringify(input.packageJson),
    base_version_id: input.baseVersionId === "" ? null : input.baseVersionId,
    published_by: input.caller.id,
    created_at: input.now,
  };
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

/** Rows changed by a raw UPDATE or DELETE on MySQL (mysql2 answers [ResultSetHeader, undefined]). */
function rawAffected(result: unknown): number {
  return Number((Array.isArray(result) ? (result[0] as { affectedRows?: number }) : undefined)?.affectedRows ?? Number.NaN);
}

/** Rows of a raw query: mysql2 answers [rows, fields], better-sqlite3 the rows. */
function rawRows<T>(result: unknown): T[] {
  return (Array.isArray(result) && Array.isArray(result[0]) ? result[0] : result) as T[];
}

function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string; errno?: number };
  return e.code === "ER_DUP_ENTRY" || e.errno === 1062 || e.code === "SQLITE_CONSTRAINT_UNIQUE";
}

/**
 * Longest a confirm waits for the group transaction in flight before it
 * goes anyway: that transaction is stuck (on a first push's lock, say).
 * Under load a group takes 5 to 20 ms here; 5 ms split the groups (2.9
 * confirms a transaction, 318 confirms/s), 20 and 50 ms measured alike
 * (5.5 and 6.2 a transaction, 444 and 455/s).
 */
const confirmGroupWaitMs = 20;

/**
 * Versions, entities and uploads in SQL, through Knex, the same code on MySQL
 * and SQLite. Every query is scoped by entity id (the future shard key).
 * Every change takes the entity row's lock (SELECT … FOR UPDATE) first and
 * the upload row's second, in one transaction, so concurrent pushes on one
 * entity serialise and pushes on different entities never wait on each
 * other.
 */
export class VersionStore {
  readonly #knex: Knex;
  /** The single-entity reads (the three gets, lists and the push pre-check), batched where round trips cost (MySQL). */
  readonly #batched: RunBatched;

  /** Confirms, grouped where round trips cost (MySQL). */
  readonly #confirm: (input: NewVersion) => Promise<ConfirmOutcome>;

  constructor(
    db: Database,
    options: {
      readonly onReadBatch?: (reads: number) => void;
      readonly onConfirmGroup?: (size: number, recorded: number) => void;
    } = {},
  ) {
    this.#knex = db.knex;
    const prepared = preparedRunner(db);
    this.#batched = db.readBatchMax > 1 ? readBatcher(prepared, { maxBatch: db.readBatchMax, onBatch: options.onReadBatch }) : prepared;
    this.#confirm =
      db.confirmGroupMax > 1
        ? confirmGrouper<NewVersion, ConfirmOutcome>({
            alone: (input) => this.#confirmAlone(input),
            released: (input) => this.#confirmAfterRecheck(input),
            together: (inputs) => this.#confirmTogether(inputs),
            groupable: (input) => input.entityExisted !== undefined,
            maxGroup: db.confirmGroupMax,
            maxWaitMs: confirmGroupWaitMs,
            onGroup: options.onConfirmGroup,
          })
        : (input) => this.#confirmAlone(input);
  }

  #versions(q: Knex | Knex.Transaction) {
    return q({ v: "versions" })
      .join({ e: "entities" }, "e.id", "v.entity_id")
      .select<VersionRow[]>(versionColumns);
  }

  async #versionById(q: Knex | Knex.Transaction, entityId: string, versionId: string): Promise<VersionRecord | undefined> {
    const row = await this.#versions(q).where("v.entity_id", entityId).andWhere("v.id", versionId).first();
    return row === undefined ? undefined : toRecord(row);
  }

  async #byVersionString(q: Knex | Knex.Transaction, entityId: string, version: string): Promise<VersionRecord | undefined> {
    const row = await this.#versions(q).where("v.entity_id", entityId).andWhere("v.version", version).first();
    return row === undefined ? undefined : toRecord(row);
  }

  async #lockEntity(trx: Knex.Transaction, entityId: string): Promise<EntityRow | undefined> {
    return trx<EntityRow>("entities").where("id", entityId).forUpdate().first();
  }

  /**
   * Reads what a push decides on before any lock, in one prepared query:
   * the caller's access, the tip's id, and the ids of a version with the
   * same source hash or version string; the records themselves only when
   * there are such (a duplicate or a conflict, the rare paths).
   * ConfirmUpload decides again under the entity lock.
   */
  async #checkPush(entityId: string, sourceHash: string, version: string, caller: Caller): Promise<PushCheck> {
    const facts = accessFactsSql(caller, { hasPublishers: true });
    const [row] = await this.#batched<AccessFactRow & { tip_version_id: string | null; duplicate_id: string | null; taken_id: string | null }>(
      `select ${facts.columns}, e.tip_version_id, ` +
        "(select d.id from versions d where d.entity_id = e.id and d.source_hash = ? order by d.seq desc limit 1) as duplicate_id, " +
        "(select t.id from versions t where t.entity_id = e.id and t.version = ?) as taken_id " +
        `from entities e ${facts.joins} where e.id = ?`,
      [...facts.columnParams, sourceHash, version, ...facts.joinParams, entityId],
    );
    const byId = async (id: string | null | undefined) => {
      if (id === null || id === undefined) return undefined;
      const [found] = await this.#batched<VersionRow>(
        `select ${versionColumnsSql} from entities e join versions v on v.entity_id = e.id and v.id = ? where e.id = ?`,
        [id, entityId],
      );
      return found === undefined ? undefined : toRecord(found);
    };
    const [duplicate, versionTaken] = await Promise.all([byId(row?.duplicate_id), byId(row?.taken_id)]);
    const tipVersionId = row?.tip_version_id ?? undefined;
    return { facts: toAccessFacts(row), entityExists: row !== undefined, tipVersionId, duplicate, versionTaken, tip: () => byId(tipVersionId) };
  }

  /**
   * Decides a push from one plain (batched) read, in the rules' order:
   * access (with the first push's claim), deduplication, push protection,
   * then the version string. Both push endpoints answer early from it, and
   * a confirm that waited behind another on its entity is decided again by
   * it; only "proceed" needs the locked transaction, which decides again.
   */
  async precheck(
    push: Pick<NewVersion, "entityId" | "sourceHash" | "version" | "baseVersionId" | "force" | "caller" | "authorize">,
  ): Promise<PushPrecheck> {
    const check = await this.#checkPush(push.entityId, push.sourceHash, push.version, push.caller);
    const access = push.authorize(check.facts);
    if (access === "hidden" || access === "forbidden") return { kind: access };
    const decision = decidePush({ duplicate: check.duplicate, tipVersionId: check.tipVersionId }, push);
    if (decision.kind === "existing") return { kind: "existing", version: decision.version };
    if (decision.kind === "stale") return { kind: "stale", tip: await check.tip() };
    if (check.versionTaken !== undefined) return { kind: "version-taken", existing: check.versionTaken };
    return { kind: "proceed", entityExists: check.entityExists };
  }

  /** Records an issued upload, so that confirm accepts its paths and the sweeper can find it. */
  async recordUpload(entityId: string, uploadId: string, now: Date): Promise<void> {
    await this.#knex("uploads").insert({ id: uploadId, entity_id: entityId, state: "issued", created_at: now, attempts: 0 });
  }

  /**
   * Records a version: alone, or together with confirms on other entities
   * that arrived at the same time (MySQL; see confirmGrouper), which
   * answers exactly as alone.
   */
  confirm(input: NewVersion): Promise<ConfirmOutcome> {
    return this.#confirm(input);
  }

  /**
   * Records a version in one transaction: creates the entity row on its first
   * push, locks it, decides deduplication and push protection against the
   * locked tip, claims the upload, inserts the version and moves the tip (and
   * the active pointer when asked). Two confirms on one base serialise on the
   * entity lock, so the second sees the first's tip and is stale.
   */
  async #confirmAlone(input: NewVersion): Promise<ConfirmOutcome> {
    // Seven round trips on the common path: begin, lock, read, claim the
    // upload, insert, move the tip, commit.
    return inTransaction<ConfirmOutcome>(this.#knex, async (trx) => {
      // Creates the entity row on a first push and takes its lock either way.
      await trx("entities")
        .insert({ id: input.entityId, last_seq: 0, created_at: input.now })
        .onConflict("id")
        .merge(["id"]);
      // Read under the lock (the snapshot starts here): access, tip and a
      // duplicate, in one statement. Of two racing first pushes the second
      // sees the first's claim.
      const facts = accessFactsSql(input.caller, { hasPublishers: true });
      const [entity] = rawRows<EntityRow & AccessFactRow & { duplicate_id: string | null }>(
        await trx.raw(
          `select e.tip_version_id, e.active_version_id, e.last_seq, ${facts.columns}, ` +
            "(select d.id from versions d where d.entity_id = e.id and d.source_hash = ? order by d.seq desc limit 1) as duplicate_id " +
            `from entities e ${facts.joins} where e.id = ?`,
          [...facts.columnParams, input.sourceHash, ...facts.joinParams, input.entityId] as never,
        ),
      );
      const access = input.authorize(toAccessFacts(entity));
      if (access === "hidden" || access === "forbidden") return { commit: false, result: { kind: access } };
      const tipVersionId = entity!.tip_version_id ?? undefined;
      const duplicate = entity!.duplicate_id === null ? undefined : await this.#versionById(trx, input.entityId, entity!.duplicate_id);
      const decision = decidePush({ duplicate, tipVersionId }, input);
      if (decision.kind === "existing") return { commit: false, result: { kind: "existing", version: decision.version } };
      if (decision.kind === "stale") {
        const tip = tipVersionId === undefined ? undefined : await this.#versionById(trx, input.entityId, tipVersionId);
        return { commit: false, result: { kind: "stale", tip } };
      }
      // Claims the upload: only an "issued" upload of this entity turns
      // "confirmed", under the row's lock, so the sweeper cannot take it.
      const claimed = await trx("uploads")
        .where({ id: input.uploadId, entity_id: input.entityId, state: "issued" })
        .update({ state: "confirmed" });
      if (claimed !== 1) {
        const upload = await trx<{ entity_id: string; state: string }>("uploads").where("id", input.uploadId).first();
        if (upload?.entity_id === input.entityId && upload.state === "confirmed") {
          const owner = await trx<{ id: string }>("versions").where("upload_id", input.uploadId).first("id");
          return { commit: false, result: { kind: "upload-used", versionId: owner?.id ?? "" } };
        }
        return { commit: false, result: { kind: "upload-missing" } };
      }
      const seq = Number(entity!.last_seq) + 1;
      try {
        await trx("versions").insert(versionRow(input, seq));
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
        const existing = await this.#byVersionString(trx, input.entityId, input.version);
        if (existing === undefined) throw error;
        return { commit: false, result: { kind: "version-taken", existing } };
      }
      if (access === "claim") await trx("entity_publishers").insert({ entity_id: input.entityId, user_id: input.caller.id });
      await trx("entities")
        .where("id", input.entityId)
        .update({
          tip_version_id: input.id,
          last_seq: seq,
          ...(input.setAsActive ? { active_version_id: input.id } : {}),
        });
      return { commit: true, result: { kind: "created", version: createdVersion(input, seq) } };
    });
  }

  /**
   * Decides a confirm again with precheck before taking the entity's lock,
   * and only one that may still create goes on to #confirmAlone. Used for
   * confirms that waited for another on their entity: of many racing on
   * one base, all but one are stale once it landed, and need not each
   * queue for the lock to learn it.
   */
  async #confirmAfterRecheck(input: NewVersion): Promise<ConfirmOutcome> {
    const early = await this.precheck(input);
    return early.kind === "proceed" ? this.#confirmAlone(input) : early;
  }

  /**
   * Records several confirms, each on a different entity, in one
   * transaction of about seven statements in all (MySQL only), and leaves
   * to #confirmAlone every confirm that is not a plain creation. The same
   * steps as alone, each done for the whole group at once:
   *
   * 1. Lock the entities: a first push's row is inserted (its lock comes
   *    with it); rows that exist are locked with SKIP LOCKED, so that an
   *    entity another transaction holds never makes the group, and the
   *    pushes to other entities in it, wait: its confirm goes alone.
   * 2. Read, under the locks, each one's access, tip, last seq, duplicate
   *    and whether its version string is taken: one UNION ALL statement.
   * 3. Keep the plain creations: access allowed (or a first push's claim),
   *    no duplicate (or force), the base is the tip, the version string
   *    free. A first push's row inserted for a confirm not kept is deleted
   *    again, so that a refused push leaves no trace.
   * 4. Claim every kept confirm's upload with one conditional UPDATE. If
   *    it claimed fewer than all (an upload swept, used or of another
   *    entity), the whole group rolls back and each is decided alone.
   * 5. Insert the versions and the claims' publishers, move the tips (and
   *    active pointers), commit.
   *
   * Throws when the group failed; nothing of it is then written.
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
        const locked = new Set<string>();
        if (firstPushes.length > 0) {
          await trx("entities").insert(firstPushes.map((i) => ({ id: i.entityId, last_seq: 0, created_at: i.now })));
          for (const i of firstPushes) locked.add(i.entityId);
        }
        if (existing.length > 0) {
          // FORCE INDEX: on a small table the optimizer may prefer a scan,
          // which would lock every row it reads, other entities' too.
          const rows = rawRows<{ id: string }>(
            await trx.raw(`select id from entities force index (primary) where id in (${placeholders(existing.length)}) for update skip locked`, existing),
          );
          for (const r of rows) locked.add(r.id);
        }
        const candidates = sorted.filter((c) => locked.has(c.input.entityId));
        if (candidates.length === 0) return { commit: false, result: undefined };

        // The first plain read of the transaction, so its snapshot starts
        // after every lock is held, as alone.
        const parts: string[] = [];
        const params: unknown[] = [];
        candidates.forEach(({ input }, part) => {
          const facts = accessFactsSql(input.caller, { hasPublishers: true });
          parts.push(
            `(select ${part} as group_part, e.tip_version_id, e.last_seq, ${facts.columns}, ` +
              "(select d.id from versions d where d.entity_id = e.id and d.source_hash = ? order by d.seq desc limit 1) as duplicate_id, " +
              "(select t.id from versions t where t.entity_id = e.id and t.version = ?) as taken_id " +
              `from entities e ${facts.joins} where e.id = ?)`,
          );
          params.push(...facts.columnParams, input.sourceHash, input.version, ...facts.joinParams, input.entityId);
        });
        const rows = rawRows<EntityRow & AccessFactRow & { group_part: number | string; duplicate_id: string | null; taken_id: string | null }>(
          await trx.raw(parts.join(" union all "), params as never),
        );

        const creating: Array<{ input: NewVersion; index: number; seq: number; claim: boolean }> = [];
        for (const row of rows) {
          const { input, index } = candidates[Number(row.group_part)]!;
          const access = input.authorize(toAccessFacts(row));
          const plain =
            (access === "allow" || access === "claim") &&
            (row.duplicate_id === null || input.force) &&
            row.taken_id === null &&
            decidePush({ duplicate: undefined, tipVersionId: row.tip_version_id ?? undefined }, input).kind === "proceed";
          if (plain) creating.push({ input, index, seq: Number(row.last_seq) + 1, claim: access === "claim" });
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
        const claimed = rawAffected(
          await trx.raw(
            `update uploads force index (primary) set state = 'confirmed' where id in (${placeholders(creating.length)}) and state = 'issued' and (` +
              creating.map(() => "(id = ? and entity_id = ?)").join(" or ") +
              ")",
            [...creating.map((c) => c.input.uploadId), ...creating.flatMap((c) => [c.input.uploadId, c.input.entityId])],
          ),
        );
        if (claimed !== creating.length) return { commit: false, result: undefined };

        await trx("versions").insert(creating.map((c) => versionRow(c.input, c.seq)));
        const claims = creating.filter((c) => c.claim);
        if (claims.length > 0) await trx("entity_publishers").insert(claims.map((c) => ({ entity_id: c.input.entityId, user_id: c.input.caller.id })));
        const tips: unknown[] = [];
        const seqs: unknown[] = [];
        const actives: unknown[] = [];
        for (const c of creating) {
          tips.push(c.input.entityId, c.input.id);
          seqs.push(c.input.entityId, c.seq);
          if (c.input.setAsActive) actives.push(c.input.entityId, c.input.id);
        }
        const when = (n: number) => " when ? then ?".repeat(n);
        await trx.raw(
          `update entities force index (primary) set tip_version_id = case id${when(creating.length)} end, last_seq = case id${when(creating.length)} end` +
            (actives.length === 0 ? "" : `, active_version_id = case id${when(actives.length / 2)} else active_version_id end`) +
            ` where id in (${placeholders(creating.length)})`,
          [...tips, ...seqs, ...actives, ...creating.map((c) => c.input.entityId)] as never,
        );
        for (const c of creating) outcomes[c.index] = { kind: "created", version: createdVersion(c.input, c.seq) };
        return { commit: true, result: undefined };
      },
      // A deadlock or lock wait is not retried as a group: each confirm is
      // then decided alone, which retries on its own.
      1,
    );
    return outcomes;
  }

  /** The active version and the caller's access to the entity: one prepared query. */
  async getActive(entityId: string, caller: Caller): Promise<ActiveLookup> {
    const facts = accessFactsSql(caller);
    const [row] = await this.#batched<VersionRow & AccessFactRow>(
      `select ${versionColumnsSql}, ${facts.columns} from entities e ${facts.joins} ` +
        "left join versions v on v.id = e.active_version_id and v.entity_id = e.id where e.id = ?",
      [...facts.columnParams, ...facts.joinParams, entityId],
    );
    const access = toAccessFacts(row);
    if (row === undefined) return { kind: "entity-missing", facts: access };
    if (row.id === null) return { kind: "none-active", facts: access };
    return { kind: "found", version: toRecord(row), facts: access };
  }

  /** A version by id and the caller's access to its entity: one prepared query. */
  async getVersionWithFacts(entityId: string, versionId: string, caller: Caller): Promise<VersionLookupWithFacts> {
    const facts = accessFactsSql(caller);
    const [row] = await this.#batched<VersionRow & AccessFactRow>(
      `select ${versionColumnsSql}, ${facts.columns} from entities e ${facts.joins} ` +
        "left join versions v on v.entity_id = e.id and v.id = ? where e.id = ?",
      [...facts.columnParams, ...facts.joinParams, versionId, entityId],
    );
    const access = toAccessFacts(row);
    if (row === undefined) return { kind: "entity-missing", facts: access };
    if (row.id === null) return { kind: "version-missing", facts: access };
    return { kind: "found", version: toRecord(row), facts: access };
  }

  /** A page of versions, newest first, and the caller's access: one prepared query. */
  async listVersionsWithFacts(entityId: string, beforeSeq: number | undefined, limit: number, caller: Caller): Promise<VersionPageWithFacts> {
    const facts = accessFactsSql(caller);
    const rows = await this.#batched<VersionRow & AccessFactRow>(
      `select ${versionColumnsSql}, ${facts.columns} from entities e ${facts.joins} ` +
        `left join versions v on v.entity_id = e.id${beforeSeq === undefined ? "" : " and v.seq < ?"} where e.id = ? ` +
        // The limit is written into the SQL, rounded up to a power of two so
        // that a handful of prepared statements serve every page size (the
        // server caps how many a session may hold).
        `order by v.seq desc limit ${nextPowerOfTwo(Math.trunc(limit) + 1)}`,
      [...facts.columnParams, ...facts.joinParams, ...(beforeSeq === undefined ? [] : [beforeSeq]), entityId],
    );
    const access = toAccessFacts(rows[0]);
    if (rows.length === 0) return { kind: "entity-missing", facts: access };
    // Sorted here: a batched read's rows come back in no set order.
    const versions = rows.filter((r) => r.id !== null).sort((a, b) => Number(b.seq) - Number(a.seq));
    return { kind: "page", versions: versions.slice(0, limit).map(toRecord), hasMore: versions.length > limit, facts: access };
  }

  /** Makes a version active under the entity lock; already active is a no-op. */
  async setActive(entityId: string, versionId: string): Promise<SetActiveOutcome> {
    return inTransaction<SetActiveOutcome>(this.#knex, async (trx) => {
      const entity = await this.#lockEntity(trx, entityId);
      if (entity === undefined) return { commit: false, result: { kind: "entity-missing" } };
      const version = await this.#versionById(trx, entityId, versionId);
      if (version === undefined) return { commit: false, result: { kind: "version-missing" } };
      if (entity.active_version_id === versionId) return { commit: false, result: { kind: "set", version } };
      await trx("entities").where("id", entityId).update({ active_version_id: versionId });
      return { commit: true, result: { kind: "set", version: { ...version, isActive: true } } };
    });
  }

  /**
   * Deletes a version that is not active, in one transaction: removes the
   * record, moves the tip back to the newest remaining version when the tip
   * goes, and marks the upload "deleting" so its blobs are deleted, now or
   * by a later retry, but never forgotten.
   */
  async deleteVersion(entityId: string, versionId: string, now: Date): Promise<DeleteOutcome> {
    return inTransaction<DeleteOutcome>(this.#knex, async (trx) => {
      const entity = await this.#lockEntity(trx, entityId);
      if (entity === undefined) return { commit: false, result: { kind: "entity-missing" } };
      const version = await trx<{ id: string; upload_id: string }>("versions")
        .where("entity_id", entityId)
        .andWhere("id", versionId)
        .first("id", "upload_id");
      if (version === undefined) return { commit: false, result: { kind: "version-missing" } };
      if (entity.active_version_id === versionId) return { commit: false, result: { kind: "active" } };
      await trx("versions").where("entity_id", entityId).andWhere("id", versionId).delete();
      await trx("uploads")
        .where("id", version.upload_id)
        .update({ state: "deleting", next_attempt_at: now, attempts: 0 });
      if (entity.tip_version_id === versionId) {
        const next = await trx<{ id: string }>("versions")
          .where("entity_id", entityId)
          .orderBy("seq", "desc")
          .first("id");
        await trx("entities")
          .where("id", entityId)
          .update({ tip_version_id: next?.id ?? null });
      }
      return { commit: true, result: { kind: "deleted", uploadId: version.upload_id } };
    });
  }
}

import { randomUUID } from "node:crypto";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  ActiveVersionChangedSchema,
  type ConfirmUploadRequest,
  type ConfirmUploadResponseSchema,
  type DeleteVersionRequest,
  type DeleteVersionResponseSchema,
  type EntityVersionsService,
  type GetActiveVersionRequest,
  type GetActiveVersionResponseSchema,
  type GetDownloadUrlRequest,
  type GetDownloadUrlResponseSchema,
  type GetUploadUrlRequest,
  type GetUploadUrlResponseSchema,
  type GetVersionRequest,
  type GetVersionResponseSchema,
  type ListVersionsRequest,
  type ListVersionsResponseSchema,
  type SetActiveVersionRequest,
  type SetActiveVersionResponseSchema,
  StaleBaseSchema,
} from "../../gen/entityversions/v1/entity_versions_pb.js";
import type { Caller } from "../auth/caller.js";
import { type AccessFacts, type Decision, decidePushAccess, decideWrite } from "../auth/policy.js";
import type { PushOutcome } from "../domain/push-decision.js";
import { type ParsedUploadPath, uploadPaths } from "../blob/blob-paths.js";
import type { BlobStore } from "../blob/blob-store.js";
import type { Clock } from "../clock.js";
import { apiError, detail, reasonOf } from "../errors/api-error.js";
import type { BlobDeleter } from "../jobs/blob-deleter.js";
import type { AccessStore } from "../store/access-store.js";
import type { ConfirmOutcome, PushRequest, VersionRecord, VersionStore } from "../store/version-store.js";
import { enforce, enforceRead, refusal, requireCaller, writeAuthorization } from "./authorize.js";
import type { PageTokens } from "./page-token.js";
import { SealTurns } from "./seal-turns.js";
import * as valid from "./validate.js";
import { toVersionMessage, toVersionRef } from "./version-message.js";

type Init<S extends DescMessage> = MessageInitShape<S>;

/** An upload path the client confirmed, taken apart. */
type StagedUpload = ParsedUploadPath & { readonly path: string };

/** Settings of the versions service, from the configuration. */
export interface EntityVersionsSettings {
  readonly uploadUrlTtlSeconds: number;
  readonly downloadUrlTtlSeconds: number;
  /** Confirms of one entity copy their uploads in turn (SealTurns); absent: on. */
  readonly copiesInTurn?: boolean;
  /** Uploads a caller may have issued on one entity and not confirmed (MAX_OPEN_UPLOADS_PER_ENTITY). */
  readonly maxOpenUploadsPerEntity: number;
  readonly limits: valid.Limits;
}

/** What the versions service is built from; all injected, so tests choose each part. */
export interface EntityVersionsDeps {
  readonly store: VersionStore;
  readonly access: AccessStore;
  readonly blobs: BlobStore;
  readonly deleter: BlobDeleter;
  readonly clock: Clock;
  readonly pageTokens: PageTokens;
  readonly settings: EntityVersionsSettings;
  readonly newId?: () => string;
}

/** The headers a PUT to an upload URL must carry, also returned with every upload URL. */
export const uploadHeaders: Readonly<Record<string, string>> = Object.freeze({
  "x-ms-blob-type": "BlockBlob",
  "Content-Type": "application/octet-stream",
});

/** The facts of a push an error names. */
interface PushErrorContext {
  readonly entityId: string;
  readonly caller: Caller;
  readonly baseVersionId: string;
  readonly storagePath?: string;
}

/**
 * The error a push outcome is answered with; undefined for the outcomes
 * that answer with a version or go on (create, existing). The one place a
 * push's refusals become API errors, for both endpoints and every path.
 */
function pushError(outcome: ConfirmOutcome | PushOutcome<VersionRecord>, c: PushErrorContext, tip?: VersionRecord): ConnectError | undefined {
  switch (outcome.kind) {
    case "refused":
      return refusal(outcome.decision, c.entityId, c.caller, true);
    case "stale": {
      const latest = "tip" in outcome ? outcome.tip : tip;
      return apiError(
        "STALE_BASE",
        { baseVersionId: c.baseVersionId, tipVersionId: latest?.id },
        { details: [detail(StaleBaseSchema, latest === undefined ? {} : { latestVersion: toVersionRef(latest) })] },
      );
    }
    case "version-taken":
      return apiError("VERSION_ALREADY_EXISTS", { entityId: outcome.existing.entityId, version: outcome.existing.version, versionId: outcome.existing.id });
    case "upload-missing":
      return apiError("UPLOAD_NOT_FOUND", { path: c.storagePath ?? "" });
    case "upload-used":
      return apiError("UPLOAD_ALREADY_CONFIRMED", {
        path: c.storagePath ?? "",
        versionId: outcome.existing.id,
        version: outcome.existing.version,
        sourceHash: outcome.existing.sourceHash,
        fileSizeBytes: outcome.existing.fileSizeBytes,
      });
    default:
      return undefined;
  }
}

/** An upload copied into the folder of the version its confirm creates. */
interface SealedUpload {
  readonly storagePath: string;
  readonly lockPath: string | undefined;
  /** The package's Content-MD5 as the store records it, base64. */
  readonly md5: string | undefined;
  /** Every blob the copy wrote. */
  readonly paths: readonly string[];
}

/**
 * The EntityVersionsService: spec sections 1 to 5, 7 and 9. Handlers
 * validate, check the caller's access (spec 5), then leave every decision
 * that must hold under concurrency to the store's locked transactions; blob
 * calls happen outside any lock.
 */
export class EntityVersionsServiceImpl implements ServiceImpl<typeof EntityVersionsService> {
  readonly #d: EntityVersionsDeps;
  readonly #newId: () => string;
  readonly #turns: SealTurns | undefined;

  constructor(deps: EntityVersionsDeps) {
    this.#d = deps;
    this.#newId = deps.newId ?? randomUUID;
    this.#turns = deps.settings.copiesInTurn === false ? undefined : new SealTurns();
  }

  /** A URL's expiry, in whole seconds: a SAS carries no fractions, so neither does expires_at. */
  #expiry(seconds: number): Date {
    return new Date(Math.floor(this.#d.clock.now().getTime() / 1000) * 1000 + seconds * 1000);
  }

  /** Checks the caller's access to the entity with the given policy; throws when refused. */
  async #authorize(
    ctx: HandlerContext,
    entityId: string,
    policy: (caller: Caller, facts: AccessFacts) => Decision,
  ): Promise<{ caller: Caller; decision: Decision }> {
    const caller = requireCaller(ctx);
    const decision = enforce(policy(caller, await this.#d.access.facts(entityId, caller, ctx.signal)), entityId, caller);
    return { caller, decision };
  }

  /** The push facts every push is decided from: the request's own, with the policy of pushes. */
  #push(ctx: HandlerContext, entityId: string, p: Omit<PushRequest, "entityId" | "caller" | "authorize" | "signal">): PushRequest {
    const caller = requireCaller(ctx);
    return { ...p, entityId, caller, authorize: (facts, hasVersions) => decidePushAccess(caller, facts, hasVersions), signal: ctx.signal };
  }

  async getUploadUrl(req: GetUploadUrlRequest, ctx: HandlerContext): Promise<Init<typeof GetUploadUrlResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const push = this.#push(ctx, entityId, {
      version: valid.versionString(req.version),
      sourceHash: valid.sourceHash(req.sourceHash),
      baseVersionId: valid.baseVersionId(req.baseVersionId),
      force: req.force,
      setAsActive: false,
    });
    // Decided as confirm will decide it, so a push that is going to be
    // refused learns it before it uploads anything.
    const { outcome, tip } = await this.#d.store.precheck(push);
    const refused = pushError(outcome, push, tip);
    if (refused !== undefined) throw refused;
    if (outcome.kind === "existing") return { existingVersion: toVersionMessage(outcome.version) };

    const uploadId = this.#newId();
    const { storagePath, lockPath } = uploadPaths(entityId, uploadId, "staging");
    const expiresAt = this.#expiry(this.#d.settings.uploadUrlTtlSeconds);
    const { maxOpenUploadsPerEntity } = this.#d.settings;
    if (!(await this.#d.store.recordUpload(entityId, uploadId, push.caller.id, this.#d.clock.now(), maxOpenUploadsPerEntity, ctx.signal))) {
      throw apiError("TOO_MANY_OPEN_UPLOADS", { entityId, limit: maxOpenUploadsPerEntity });
    }
    return {
      uploadUrl: this.#d.blobs.signUploadUrl(storagePath, expiresAt),
      storagePath,
      lockfileUploadUrl: this.#d.blobs.signUploadUrl(lockPath, expiresAt),
      packageLockPath: lockPath,
      expiresAt: timestampFromDate(expiresAt),
      uploadHeaders: { ...uploadHeaders },
      maxFileSizeBytes: BigInt(this.#d.settings.limits.maxPackageBytes),
      maxPackageJsonBytes: BigInt(this.#d.settings.limits.maxPackageJsonBytes),
      maxPackageJsonValues: BigInt(this.#d.settings.limits.maxPackageJsonValues),
    };
  }

  async confirmUpload(req: ConfirmUploadRequest, ctx: HandlerContext): Promise<Init<typeof ConfirmUploadResponseSchema>> {
    const { limits } = this.#d.settings;
    const entityId = valid.entityId(req.entityId);
    const upload: StagedUpload = { ...valid.uploadPath(req.storagePath, "storage_path", entityId, "package"), path: req.storagePath };
    const version = valid.versionString(req.version);
    const sourceHash = valid.sourceHash(req.sourceHash);
    const fileSizeBytes = valid.fileSize(req.fileSizeBytes, limits);
    const baseVersionId = valid.baseVersionId(req.baseVersionId);
    const serviceDependencies = valid.serviceDependencies(req.serviceDependencies, limits);
    const packageJson = valid.packageJson(req.packageJson, limits);
    const lock: StagedUpload | undefined =
      req.packageLockPath === "" ? undefined : { ...valid.uploadPath(req.packageLockPath, "package_lock_path", entityId, "lockfile"), path: req.packageLockPath };
    if (lock !== undefined && lock.uploadId !== upload.uploadId) {
      throw apiError("INVALID_ARGUMENT", {
        field: "package_lock_path",
        problem: "must be the package_lock_path upload-url returned together with storage_path",
      });
    }
    const push = this.#push(ctx, entityId, { version, sourceHash, baseVersionId, force: req.force, setAsActive: req.setAsActive, uploadId: upload.uploadId, fileSizeBytes });
    const context: PushErrorContext = { ...push, storagePath: req.storagePath };

    // Decided first from a plain read, before touching the blob store: a
    // retried confirm and a duplicate answer 200 whatever else the request
    // says, a doomed push learns STALE_BASE before any upload problem.
    // Writes are decided again under the entity lock. Should that decision
    // have changed from answering an existing version to creating one (the
    // duplicate was deleted meanwhile), the confirm starts over, once.
    // A confirm that would create a version waits for the one of this
    // process in front of it on the entity, then decides again (SealTurns).
    let retried = false;
    for (;;) {
      // A confirm of this entity that ends while this one decides may have moved the tip.
      const decidedAt = this.#turns?.mark();
      const { outcome, entityExists, tip } = await this.#d.store.precheck(push);
      const refused = pushError(outcome, context, tip);
      if (refused !== undefined) throw refused;
      // already_confirmed says whose version it is, not whether the request
      // repeats the first one: a client that rebuilt its retried confirm
      // (a new version string) is still answered the version its upload made.
      if (outcome.kind === "existing" && !outcome.activate) return { version: toVersionMessage(outcome.version), created: false, alreadyConfirmed: outcome.version.uploadId === upload.uploadId };
      const create = outcome.kind === "create";
      const release = create && this.#turns !== undefined ? await this.#turns.take(entityId, ctx.signal, decidedAt) : () => undefined;
      if (release === undefined) continue;
      const id = this.#newId();
      let sealed: SealedUpload | undefined;
      let result: ConfirmOutcome;
      try {
        try {
          sealed = create ? await this.#seal(upload, lock, id, fileSizeBytes, ctx.signal) : undefined;
        } catch (error) {
          // A racing confirm of the same upload may have created the version
          // and discarded the staged blob meanwhile: decide again, once, and
          // answer that version.
          if (!retried && error instanceof ConnectError && reasonOf(error) === "UPLOAD_NOT_FOUND") {
            retried = true;
            continue;
          }
          throw error;
        }
        result = await this.#d.store.confirm({
          ...push,
          id,
          uploadId: upload.uploadId,
          storagePath: sealed?.storagePath ?? "",
          fileSizeBytes,
          packageMd5: sealed?.md5,
          packageLockPath: sealed?.lockPath,
          serviceDependencies,
          packageJson,
          now: this.#d.clock.now(),
          mayCreate: create,
          entityExisted: entityExists,
        });
      } finally {
        release();
      }
      // This confirm's own copy serves no version unless it created one:
      // nothing else will ever use it. Deleted while the answer goes out
      // (best effort: the sweeper deletes what is left, and keeps a copy
      // whose version was committed after all when the store's answer was
      // lost to an error).
      if (sealed !== undefined && result.kind !== "created") void this.#d.deleter.discard(sealed.paths);
      if (result.kind === "changed" && !retried) {
        retried = true;
        continue;
      }
      const failed = pushError(result, context);
      if (failed !== undefined) throw failed;
      if (result.kind === "created") {
        // The version serves its own copy now; the staged upload is only in
        // the way. Deleted while the answer goes out, not before it: the
        // version is recorded, and a slow delete must not turn that into a
        // DEADLINE_EXCEEDED (the sweeper deletes what is left).
        void this.#d.deleter.discard([upload.path, ...(lock === undefined ? [] : [lock.path])]);
        return { version: toVersionMessage(result.version), created: true };
      }
      if (result.kind === "existing") return { version: toVersionMessage(result.version), created: false, alreadyConfirmed: result.version.uploadId === upload.uploadId };
      throw apiError("DATABASE_BUSY", {});
    }
  }

  /**
   * Makes a confirmed upload immutable: checks the staged package's size,
   * then copies it (and the lockfile) inside the store to the version's own
   * folder, named by the id of the version this confirm is about to create,
   * for which no write URL is ever signed. The copy takes the package only
   * as it was checked (its ETag). Every confirm makes its own copy: one made
   * by an earlier confirm of the same upload (refused, say, for a stale
   * base, after which the client may rewrite its upload) is never taken for
   * another version. Returns the final paths and the package's fingerprint.
   */
  async #seal(
    upload: StagedUpload,
    lock: StagedUpload | undefined,
    versionId: string,
    fileSizeBytes: number,
    signal: AbortSignal,
  ): Promise<SealedUpload> {
    const final = uploadPaths(upload.entityId, versionId, "final");
    const { blobs } = this.#d;
    let md5: string | undefined;
    for (let attempt = 1; ; attempt++) {
      const staged = await blobs.stat(upload.path, signal);
      if (staged === undefined) throw apiError("UPLOAD_NOT_FOUND", { path: upload.path });
      if (staged.blobType !== "BlockBlob") throw apiError("UPLOAD_NOT_BLOCK_BLOB", { path: upload.path, blobType: staged.blobType });
      if (staged.size !== fileSizeBytes) throw apiError("UPLOAD_SIZE_MISMATCH", { path: upload.path, expected: fileSizeBytes, actual: staged.size });
      const copied = await blobs.copyOnce(upload.path, final.storagePath, staged.etag, signal);
      if (copied === "source-missing") throw apiError("UPLOAD_NOT_FOUND", { path: upload.path });
      if (copied === "source-changed") {
        if (attempt < 2) continue;
        throw apiError("UPLOAD_CHANGED", { path: upload.path });
      }
      if (copied === "exists") {
        // Only this confirm writes this folder: "exists" is the store
        // client's retry of a copy whose first answer was lost, or, with
        // nothing there, the store's refusal to read the source (a 409 too).
        const existing = await blobs.stat(final.storagePath, signal);
        if (existing === undefined) throw apiError("UPLOAD_NOT_READABLE", { path: upload.path });
        if (existing.size !== fileSizeBytes) throw apiError("UPLOAD_CHANGED", { path: upload.path });
      }
      md5 = staged.md5;
      break;
    }
    if (lock !== undefined) {
      const refused = await this.#sealLockfile(lock.path, final.lockPath, signal);
      if (refused !== undefined) {
        await this.#d.deleter.discard([final.storagePath]);
        throw refused;
      }
    }
    const lockPath = lock === undefined ? undefined : final.lockPath;
    return { storagePath: final.storagePath, lockPath, md5, paths: [final.storagePath, ...(lockPath === undefined ? [] : [lockPath])] };
  }

  /**
   * Copies the staged lockfile to the version's folder under the package's
   * rules: a block blob, taken only as it was checked. Returns the refusal,
   * if any, for the caller to throw once it has discarded the package copy.
   */
  async #sealLockfile(path: string, destination: string, signal: AbortSignal): Promise<ConnectError | undefined> {
    const { blobs } = this.#d;
    for (let attempt = 1; ; attempt++) {
      const staged = await blobs.stat(path, signal);
      if (staged === undefined) return apiError("UPLOAD_NOT_FOUND", { path });
      if (staged.blobType !== "BlockBlob") return apiError("UPLOAD_NOT_BLOCK_BLOB", { path, blobType: staged.blobType });
      const copied = await blobs.copyOnce(path, destination, staged.etag, signal);
      if (copied === "source-missing") return apiError("UPLOAD_NOT_FOUND", { path });
      if (copied === "source-changed") {
        if (attempt < 2) continue;
        return apiError("UPLOAD_CHANGED", { path });
      }
      // As for the package: "exists" is a retried copy whose first answer
      // was lost, or the store's refusal to read the source.
      if (copied === "exists") {
        const existing = await blobs.stat(destination, signal);
        if (existing === undefined) return apiError("UPLOAD_NOT_READABLE", { path });
        if (existing.size !== staged.size) return apiError("UPLOAD_CHANGED", { path });
      }
      return undefined;
    }
  }

  async #version(ctx: HandlerContext, entityIdValue: string, versionIdValue: string): Promise<VersionRecord> {
    const entityId = valid.entityId(entityIdValue);
    const versionId = valid.versionId(versionIdValue);
    const caller = requireCaller(ctx);
    // One query: the version and the caller's access together.
    const found = enforceRead(await this.#d.store.getVersionWithFacts(entityId, versionId, caller, ctx.signal), entityId, caller);
    if (found.kind === "version-missing") throw apiError("VERSION_NOT_FOUND", { entityId, versionId });
    return found.version;
  }

  async getDownloadUrl(req: GetDownloadUrlRequest, ctx: HandlerContext): Promise<Init<typeof GetDownloadUrlResponseSchema>> {
    const version = await this.#version(ctx, req.entityId, req.versionId);
    const expiresAt = this.#expiry(this.#d.settings.downloadUrlTtlSeconds);
    return {
      downloadUrl: this.#d.blobs.signDownloadUrl(version.storagePath, expiresAt),
      expiresAt: timestampFromDate(expiresAt),
      version: toVersionMessage(version),
      ...(version.packageLockPath === undefined
        ? {}
        : { lockfileDownloadUrl: this.#d.blobs.signDownloadUrl(version.packageLockPath, expiresAt) }),
    };
  }

  async getActiveVersion(req: GetActiveVersionRequest, ctx: HandlerContext): Promise<Init<typeof GetActiveVersionResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const caller = requireCaller(ctx);
    // One query: the active version and the caller's access together.
    const found = enforceRead(await this.#d.store.getActive(entityId, caller, ctx.signal), entityId, caller);
    if (found.kind === "none-active") throw apiError("NO_ACTIVE_VERSION", { entityId });
    return { version: toVersionMessage(found.version) };
  }

  async setActiveVersion(req: SetActiveVersionRequest, ctx: HandlerContext): Promise<Init<typeof SetActiveVersionResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const versionId = valid.versionId(req.versionId);
    const expected = req.expectedActiveVersionId;
    // Empty expects no active version; anything else must be a version id.
    if (expected !== undefined && expected !== "") valid.versionId(expected, "expected_active_version_id");
    const { caller } = await this.#authorize(ctx, entityId, decideWrite);
    const outcome = await this.#d.store.setActive({
      entityId,
      versionId,
      expectedActiveVersionId: expected,
      change: { actor: caller.id, at: this.#d.clock.now() },
      authorization: writeAuthorization(caller),
      signal: ctx.signal,
    });
    if (outcome.kind === "refused") throw refusal(outcome.decision, entityId, caller);
    if (outcome.kind === "entity-missing") throw apiError("ENTITY_NOT_FOUND", { entityId });
    if (outcome.kind === "version-missing") throw apiError("VERSION_NOT_FOUND", { entityId, versionId });
    if (outcome.kind === "active-changed") {
      const { current } = outcome;
      throw apiError(
        "ACTIVE_VERSION_CHANGED",
        { entityId, expected: expected ?? "", actual: current?.id },
        { details: [detail(ActiveVersionChangedSchema, current === undefined ? {} : { currentActiveVersion: toVersionRef(current) })] },
      );
    }
    return { version: toVersionMessage(outcome.version) };
  }

  async deleteVersion(req: DeleteVersionRequest, ctx: HandlerContext): Promise<Init<typeof DeleteVersionResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const versionId = valid.versionId(req.versionId);
    const { caller } = await this.#authorize(ctx, entityId, decideWrite);
    const outcome = await this.#d.store.deleteVersion(entityId, versionId, { actor: caller.id, at: this.#d.clock.now() }, writeAuthorization(caller), ctx.signal);
    if (outcome.kind === "refused") throw refusal(outcome.decision, entityId, caller);
    if (outcome.kind === "entity-missing") throw apiError("ENTITY_NOT_FOUND", { entityId });
    if (outcome.kind === "version-missing") throw apiError("VERSION_NOT_FOUND", { entityId, versionId });
    if (outcome.kind === "active") throw apiError("ACTIVE_VERSION_NOT_DELETABLE", { entityId, versionId });
    // The record is gone and the blobs are queued in the same transaction;
    // deleting them now is best effort, the deleter retries what fails. Not
    // waited for: a slow blob store must not turn a deletion that is done
    // into a DEADLINE_EXCEEDED, whose retry would find no version.
    this.#d.deleter.deleteSoon(entityId, outcome.uploadId, outcome.versionId);
    return {};
  }

  async listVersions(req: ListVersionsRequest, ctx: HandlerContext): Promise<Init<typeof ListVersionsResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const size = valid.pageSize(req.pageSize);
    const caller = requireCaller(ctx);
    const beforeSeq = this.#d.pageTokens.startOf(req.pageToken, entityId);
    // One query: the page and the caller's access together.
    const page = enforceRead(await this.#d.store.listVersionsWithFacts(entityId, beforeSeq, size, caller, ctx.signal), entityId, caller);
    return {
      versions: page.versions.map(toVersionMessage),
      nextPageToken: this.#d.pageTokens.nextAfter(entityId, page.hasMore, page.versions[page.versions.length - 1]?.seq),
    };
  }

  async getVersion(req: GetVersionRequest, ctx: HandlerContext): Promise<Init<typeof GetVersionResponseSchema>> {
    return { version: toVersionMessage(await this.#version(ctx, req.entityId, req.versionId)) };
  }
}

import { Code } from "@connectrpc/connect";

/**
 * One entry of the error catalog: the gRPC code, the HTTP status a REST
 * client sees, and how the human-readable message is written from the
 * parameters. Messages say what went wrong and what to do about it, because
 * a CLI user reads them verbatim.
 */
export interface ErrorSpec<P> {
  readonly code: Code;
  readonly httpStatus: number;
  readonly message: (params: P) => string;
  /** Whether a client may retry the same request unchanged later. */
  readonly retryable?: boolean;
}

/**
 * The HTTP status of each gRPC code, as in google.rpc.Code's documentation
 * (AIP-193) and grpc-gateway. An entry may override it where HTTP has a more
 * precise status (415, 413).
 */
export const httpStatusOfCode: Readonly<Record<Code, number>> = Object.freeze({
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
});

function spec<P = Record<string, never>>(
  code: Code,
  message: (params: P) => string,
  extra: { httpStatus?: number; retryable?: boolean } = {},
): ErrorSpec<P> {
  return Object.freeze({
    code,
    httpStatus: extra.httpStatus ?? httpStatusOfCode[code],
    message,
    ...(extra.retryable === undefined ? {} : { retryable: extra.retryable }),
  });
}

/**
 * Every error the service can answer, by its stable reason. The reason is the
 * REST body's `code` and the `reason` of the google.rpc.ErrorInfo detail on
 * gRPC and Connect; clients switch on it, so a reason is never renamed.
 */
export const catalog = Object.freeze({
  INVALID_ARGUMENT: spec<{ field: string; problem: string }>(
    Code.InvalidArgument,
    (p) => `Invalid ${p.field}: ${p.problem}`,
  ),
  MALFORMED_REQUEST: spec<{ problem: string }>(
    Code.InvalidArgument,
    (p) => `The request could not be read: ${p.problem}`,
  ),
  UNSUPPORTED_MEDIA_TYPE: spec<{ contentType: string; rpc?: boolean }>(
    Code.InvalidArgument,
    (p) =>
      p.rpc === true
        ? `Content-Type ${p.contentType} is not one this RPC takes: call a unary RPC with application/json or application/proto (Connect; a Connect GET names it in ?encoding=json or proto), a streaming one with application/connect+json or application/connect+proto, or any with application/grpc (gRPC) or application/grpc-web (gRPC-Web); REST is served under /api.`
        : `Content-Type ${p.contentType} is not supported: send a JSON body, in UTF-8, with Content-Type: application/json.`,
    { httpStatus: 415 },
  ),
  UNSUPPORTED_CONTENT_ENCODING: spec<{ contentEncoding: string }>(
    Code.InvalidArgument,
    (p) => `Content-Encoding ${p.contentEncoding} is not supported on REST: send the JSON body uncompressed, without Content-Encoding.`,
    { httpStatus: 415 },
  ),
  REQUEST_TOO_LARGE: spec<{ limitBytes: number }>(
    Code.ResourceExhausted,
    (p) => `The request body is larger than ${p.limitBytes} bytes, the most this server takes (its MAX_REQUEST_BYTES): send a smaller one, e.g. a smaller package_json.`,
    { httpStatus: 413 },
  ),
  REQUEST_HEADERS_TOO_LARGE: spec<{ limitBytes: number }>(
    Code.ResourceExhausted,
    (p) => `The request's URL and headers are larger than ${p.limitBytes} bytes together, the most this server reads: shorten the URL (a long value belongs in the body) or the headers.`,
    { httpStatus: 431 },
  ),
  REQUEST_BODY_TIMEOUT: spec<{ timeoutMs: number }>(
    Code.DeadlineExceeded,
    (p) => `The request body did not arrive within ${p.timeoutMs} ms: send the whole body at once, and retry.`,
    { httpStatus: 408 },
  ),
  IN_FLIGHT_BYTES_EXCEEDED: spec<{ limitBytes: number; scope: string }>(
    Code.ResourceExhausted,
    (p) =>
      `More than ${p.limitBytes} bytes of request bodies are in flight on this ${p.scope}: wait for answers before sending more, then retry.`,
    { retryable: true },
  ),
  TOO_MANY_CALLS: spec<{ limit: number; scope: "connection" | "server" | "caller" }>(
    Code.ResourceExhausted,
    (p) =>
      p.scope === "connection"
        ? `This connection already has ${p.limit} calls running: wait for answers before sending more. The server closes the connection after this answer; reconnect, then retry.`
        : p.scope === "caller"
          ? `You already have ${p.limit} calls running on this server, over all your connections: wait for answers before sending more, then retry.`
          : `The server is at its limit of ${p.limit} calls running, with as many more waiting as it keeps (or this one waited its whole deadline): retry shortly, or on another replica.`,
    { retryable: true },
  ),
  TOO_MANY_WATCHES: spec<{ limit: number; scope: "caller" | "server" }>(
    Code.ResourceExhausted,
    (p) =>
      p.scope === "caller"
        ? `You already have ${p.limit} watches open on this server: end one before starting another (one watch per entity is enough), then retry.`
        : `This server already serves ${p.limit} watches: retry shortly, or against another replica.`,
    { retryable: true },
  ),
  TOO_MANY_STREAMS: spec<{ limit: number; scope: "peer" | "server" }>(
    Code.ResourceExhausted,
    (p) =>
      p.scope === "peer"
        ? `This address already has ${p.limit} health Watch and reflection streams open: end one before opening another, or probe with Health/Check instead.`
        : `This server already has ${p.limit} health Watch and reflection streams open: probe with Health/Check instead, or retry shortly, or against another replica.`,
    { retryable: true },
  ),
  EVENTS_EXPIRED: spec<{ entityId: string; afterEventId: string; prunedThrough: string }>(
    Code.OutOfRange,
    (p) =>
      `The events of entity "${p.entityId}" up to "${p.prunedThrough}" are no longer kept (EVENT_RETENTION_DAYS), so the events after "${p.afterEventId}" cannot all be sent: watch without after_event_id and, once its first bookmark has come, read the entity's state afresh (GetActiveVersion, ListVersions); what changes after that comes on the watch.`,
    // As Kubernetes answers a watch from a resourceVersion it no longer has.
    { httpStatus: 410 },
  ),
  DEADLINE_EXCEEDED: spec<{ lastEventId?: string }>(
    Code.DeadlineExceeded,
    (p) =>
      p.lastEventId === undefined
        ? "The call did not finish within its deadline (a dependency may be slow): retry, with a longer deadline if the one you set was short; retrying a push or a confirm is safe."
        : `The watch reached the deadline its client set: watch again with after_event_id=${p.lastEventId} to miss nothing.`,
    { retryable: true },
  ),
  ROUTE_NOT_FOUND: spec<{ method: string; path: string }>(
    Code.Unimplemented,
    (p) => `No route ${p.method} ${p.path}: the API's paths are listed at /docs and in /openapi.json.`,
    { httpStatus: 404 },
  ),
  HEALTH_SERVICE_UNKNOWN: spec<{ service: string }>(
    Code.NotFound,
    (p) => `No service "${p.service}" is served here: check "" for the whole server, or a service gRPC reflection lists (e.g. entityversions.v1.EntityVersionsService).`,
  ),
  UNKNOWN_METHOD: spec<{ path: string }>(
    Code.Unimplemented,
    (p) => `No method ${p.path} on this server: list its services and methods with gRPC reflection (e.g. npx buf curl --list-methods <url>).`,
    { httpStatus: 404 },
  ),
  METHOD_NOT_ALLOWED: spec<{ method: string; path: string; allowed: string }>(
    Code.Unimplemented,
    (p) => `${p.path} does not take ${p.method}; it takes ${p.allowed} (see /docs).`,
    { httpStatus: 405 },
  ),
  ENTITY_NOT_FOUND: spec<{ entityId: string; taken?: true; pushWithoutRole?: true }>(
    Code.NotFound,
    (p) =>
      p.taken === true
        ? `Entity id "${p.entityId}" is taken, and you are not one of its publishers (or no longer are): push under another id, or ask one of its publishers to add you as a publisher.`
        : `Entity "${p.entityId}" does not exist, or you have no access to it: check the id, or ask one of its publishers to share it with you. An entity is created by its first confirmed push${
            p.pushWithoutRole === true ? ", which needs the publisher role: your token does not carry it" : ""
          }.`,
  ),
  VERSION_NOT_FOUND: spec<{ entityId: string; versionId: string }>(
    Code.NotFound,
    (p) => `Version "${p.versionId}" does not exist in entity "${p.entityId}": list the entity's versions to find its id.`,
  ),
  NO_ACTIVE_VERSION: spec<{ entityId: string }>(
    Code.NotFound,
    (p) => `Entity "${p.entityId}" has no active version: set one with PUT /api/entities/${p.entityId}/active-version.`,
  ),
  STALE_BASE: spec<{ baseVersionId: string; tipVersionId: string | undefined }>(
    Code.Aborted,
    (p) =>
      p.tipVersionId === undefined
        ? `Base version "${p.baseVersionId}" is not the tip: the entity has no versions, so push without base_version_id.`
        : p.baseVersionId === ""
          ? `No base_version_id, and the entity already has versions: base_version_id must name its tip "${p.tipVersionId}" (see latest_version). Reconcile with it and retry.`
          : `Base version "${p.baseVersionId}" is not the tip "${p.tipVersionId}" (see latest_version): a newer version was published after it, or it is not a version of this entity. Reconcile with the tip and retry with its id as base_version_id.`,
  ),
  ACTIVE_VERSION_CHANGED: spec<{ entityId: string; expected: string; actual: string | undefined }>(
    Code.Aborted,
    (p) =>
      `The active version of entity "${p.entityId}" is ${p.actual === undefined ? "none" : `"${p.actual}"`}, not the expected ${
        p.expected === "" ? "none" : `"${p.expected}"`
      }: another change came first (see current_active_version). Decide against it, then retry with expected_active_version_id set to ${
        p.actual === undefined ? '"" (none active)' : "it"
      }.`,
  ),
  VERSION_ALREADY_EXISTS: spec<{ entityId: string; version: string; versionId: string }>(
    Code.AlreadyExists,
    (p) => `Entity "${p.entityId}" already has version string "${p.version}" (version "${p.versionId}"): push with a new version string.`,
  ),
  ACTIVE_VERSION_NOT_DELETABLE: spec<{ entityId: string; versionId: string }>(
    Code.FailedPrecondition,
    (p) => `Version "${p.versionId}" is the active version of entity "${p.entityId}" and cannot be deleted: set another version active first.`,
  ),
  UPLOAD_NOT_FOUND: spec<{ path: string }>(
    Code.FailedPrecondition,
    (p) => `Nothing was uploaded to "${p.path}", or the upload was discarded: PUT the file to the upload URL first, or request a new one.`,
  ),
  UPLOAD_SIZE_MISMATCH: spec<{ path: string; expected: number; actual: number }>(
    Code.FailedPrecondition,
    (p) => `The upload at "${p.path}" is ${p.actual} bytes, but file_size_bytes says ${p.expected}: upload the whole file again or send its real size.`,
  ),
  UPLOAD_NOT_BLOCK_BLOB: spec<{ path: string; blobType: string }>(
    Code.FailedPrecondition,
    (p) =>
      `The upload at "${p.path}" is a ${p.blobType}, not a block blob: PUT the file to the upload URL again with the upload_headers ` +
      "GetUploadUrl returned (x-ms-blob-type: BlockBlob), then confirm.",
  ),
  UPLOAD_NOT_READABLE: spec<{ path: string }>(
    Code.FailedPrecondition,
    (p) =>
      `The upload at "${p.path}" could not be copied: the blob store would not read it (one moved to the Archive tier cannot be read, nor overwritten): ` +
      "ask for a new upload URL (GetUploadUrl), upload the file there, and confirm with that one.",
  ),
  UPLOAD_ALREADY_CONFIRMED: spec<{ path: string; versionId: string; version: string; sourceHash: string; fileSizeBytes: number }>(
    Code.AlreadyExists,
    (p) =>
      `The upload at "${p.path}" already made version "${p.versionId}" (version ${p.version}, source_hash ${p.sourceHash}, ${p.fileSizeBytes} bytes), and this confirm names another push: ` +
      "a retry must send what the first confirm sent; for a new push, ask upload-url for new URLs.",
  ),
  UPLOAD_CHANGED: spec<{ path: string }>(
    Code.Aborted,
    (p) => `The upload at "${p.path}" changed while it was being confirmed: finish uploading, then confirm again.`,
    { retryable: true },
  ),
  AUTH_REQUIRED: spec(
    Code.Unauthenticated,
    () => "Authentication required: send Authorization: Bearer <token> (gRPC: authorization metadata). See the README for development tokens.",
  ),
  TOKEN_MALFORMED: spec<{ problem?: string }>(
    Code.Unauthenticated,
    (p) => `${p.problem ?? "The bearer token is not a well-formed JWT signed with an accepted algorithm"}: send Authorization: Bearer <jwt>.`,
  ),
  TOKEN_BAD_SIGNATURE: spec(
    Code.Unauthenticated,
    () => "The bearer token's signature does not verify (wrong key, or a key this service does not know): get a token from the right issuer.",
  ),
  TOKEN_EXPIRED: spec<{ lastEventId?: string }>(Code.Unauthenticated, (p) =>
    p.lastEventId === undefined
      ? "The bearer token has expired: get a new one."
      : `The bearer token has expired: get a new one and watch again with after_event_id=${p.lastEventId} to miss nothing.`,
  ),
  TOKEN_NOT_YET_VALID: spec(
    Code.Unauthenticated,
    () => "The bearer token is not valid yet (its nbf or iat is in the future): check the issuer's clock.",
  ),
  TOKEN_LIFETIME_TOO_LONG: spec<{ maxSeconds: number }>(
    Code.Unauthenticated,
    (p) => `The bearer token lives longer than this service accepts (${p.maxSeconds} s from iat to exp): get a shorter-lived token.`,
  ),
  TOKEN_WRONG_ISSUER: spec(
    Code.Unauthenticated,
    () => "The bearer token comes from an issuer this service does not accept (iss): get a token from the issuer it trusts (its AUTH_ISSUER).",
  ),
  TOKEN_WRONG_AUDIENCE: spec(Code.Unauthenticated, () => "The bearer token is not meant for this service (aud): get a token for it."),
  TOKEN_CLAIMS_INVALID: spec<{ problem: string }>(
    Code.Unauthenticated,
    (p) => `The bearer token's claims are not usable: ${p.problem}. Get a token that has sub (a user id without spaces) and exp, with roles and orgs, when present, lists of ids.`,
  ),
  AUTH_KEYS_UNAVAILABLE: spec(
    Code.Unavailable,
    () => "The token signing keys (JWKS) cannot be fetched right now: retry in a few seconds.",
    { retryable: true },
  ),
  PERMISSION_DENIED: spec<{ entityId: string; problem: string }>(
    Code.PermissionDenied,
    (p) => `Not allowed on entity "${p.entityId}": ${p.problem}`,
  ),
  LAST_PUBLISHER: spec<{ entityId: string; userId: string }>(
    Code.FailedPrecondition,
    (p) => `"${p.userId}" is the last publisher of entity "${p.entityId}" and cannot be removed: add another publisher first.`,
  ),
  ACCESS_LIST_FULL: spec<{ entityId: string; list: string; limit: number }>(
    Code.FailedPrecondition,
    (p) => `Entity "${p.entityId}" already has ${p.limit} ${p.list}, as many as allowed: remove one first (an organization's store reaches all its members at once).`,
  ),
  TOO_MANY_OPEN_UPLOADS: spec<{ entityId: string; limit: number }>(
    Code.ResourceExhausted,
    (p) =>
      `You already have ${p.limit} uploads of entity "${p.entityId}" issued and not confirmed (MAX_OPEN_UPLOADS_PER_ENTITY, counted per caller): confirm the pushes you started, or ask again once the sweeper has discarded those older than ORPHAN_GRACE_SECONDS. A client asking for upload URLs in a loop without confirming has a bug.`,
  ),
  DATABASE_UNAVAILABLE: spec(
    Code.Unavailable,
    () => "The database is unavailable: nothing was changed; retry in a few seconds.",
    { retryable: true },
  ),
  COMMIT_OUTCOME_UNKNOWN: spec(
    Code.Unavailable,
    () =>
      "The connection to the database failed while the change was being committed, so it may have been made: read it back before you retry " +
      "(a retried confirm, activation or access change is safe either way; a retried delete answers VERSION_NOT_FOUND if the first one was made).",
    { retryable: true },
  ),
  DATABASE_BUSY: spec(
    Code.Unavailable,
    () => "The database is busy with conflicting changes to this entity: nothing was changed; retry in a moment.",
    { retryable: true },
  ),
  BLOB_STORE_UNAVAILABLE: spec(
    Code.Unavailable,
    () => "The blob store is unavailable: nothing was changed; retry in a few seconds.",
    { retryable: true },
  ),
  SHUTTING_DOWN: spec<{ lastEventId?: string }>(
    Code.Unavailable,
    (p) =>
      p.lastEventId === undefined
        ? "The server is shutting down: retry against another replica."
        : `The server is shutting down: watch again (another replica will answer) with after_event_id=${p.lastEventId} to miss nothing.`,
    { retryable: true },
  ),
  INTERNAL: spec(
    Code.Internal,
    () => "Internal error: it has been logged; retry, and report it if it persists.",
  ),
});

/** A stable error reason: a key of the catalog. */
export type Reason = keyof typeof catalog;

/** The parameters an error reason's message is written from. */
export type ParamsOf<R extends Reason> = (typeof catalog)[R] extends ErrorSpec<infer P> ? P : never;

/** The domain of every google.rpc.ErrorInfo this service sends. */
export const errorDomain = "entityversions";

/** Whether a string is a reason of the catalog. */
export function isReason(value: string): value is Reason {
  return Object.hasOwn(catalog, value);
}

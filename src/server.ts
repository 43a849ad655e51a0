import { randomUUID } from "node:crypto";
import { setMaxListeners } from "node:events";
import type http from "node:http";
import http2 from "node:http2";
import { Readable } from "node:stream";
import { Code, ConnectError, type ConnectRouter, createContextValues, createServiceImplSpec, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerFactory,
  LogController,
} from "fastify";
import { EntityAccessService, file_entityversions_v1_entity_access } from "../gen/entityversions/v1/entity_access_pb.js";
import { EntityEventsService, file_entityversions_v1_entity_events } from "../gen/entityversions/v1/entity_events_pb.js";
import { EntityVersionsService, file_entityversions_v1_entity_versions } from "../gen/entityversions/v1/entity_versions_pb.js";
import { file_grpc_health_v1_health, Health } from "../gen/grpc/health/v1/health_pb.js";
import { file_grpc_reflection_v1_reflection, ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import {
  file_grpc_reflection_v1alpha_reflection,
  ServerReflection as ServerReflectionV1alpha,
} from "../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { file_google_rpc_error_details } from "../gen/google/rpc/error_details_pb.js";
import { type AuthResult, type Authenticator, authenticateHeader, authInterceptor, authResultKey } from "./auth/caller.js";
import type { HttpLimits, RpcInflationScope } from "./config.js";
import { apiError, reasonOf } from "./errors/api-error.js";
import { BodyBudget } from "./http/body-budget.js";
import { type CallPass, type CallRefusal, CallGate, isRefusal, isWait } from "./http/call-gate.js";
import { noteClose } from "./http/closed-responses.js";
import { type BodyGuard, guardedBody } from "./http/guarded-body.js";
import { shown, shownPath } from "./http/shown-path.js";
import { createOnePortServer, type RequestHandler, type UnreadableRequest } from "./net/one-port-server.js";
import { HealthService } from "./ops/health-service.js";
import type { Metrics } from "./ops/metrics.js";
import { metricsRenderer } from "./ops/metrics-endpoint.js";
import type { Readiness } from "./ops/readiness.js";
import { ReflectionService } from "./ops/reflection-service.js";
import { renderRestError, sendRestError } from "./rest/rest-error.js";
import { registerOpenApiRoutes } from "./rest/openapi-routes.js";
import { registerRestGateway } from "./rest/rest-gateway.js";
import { successStatus } from "./rest/success-status.js";
import { connectRoutes, protocolOf, type RpcRouteConfig } from "./rpc/connect-routes.js";
import { sendTrailersOnly } from "./rpc/trailers-only.js";
import { connectErrorJson, isConnectGet, isRpcPath, unknownMethodAnswer } from "./rpc/unknown-method.js";
import { deadlineInterceptor } from "./rpc/deadline-interceptor.js";
import { dropAnswerKey, openStreamsInterceptor, peerKey } from "./rpc/open-streams-interceptor.js";
import { deadlineSignal } from "./rpc/deadline-signal.js";
import { clientTimeoutMs, deadlineHeader } from "./rpc/timeout-headers.js";
import { AbandonedWork, abandonedWorkInterceptor, abandonedWorkKey } from "./rpc/abandoned-work.js";
import { errorInterceptor, requestLogKey, toCatalogError } from "./rpc/error-interceptor.js";
import { createInProcessCaller, createInProcessStreamCaller } from "./rpc/in-process-caller.js";
import { codeName, noteRefusal, observeInterceptor, type RpcOutcome, recordRpc, rpcOutcomeKey } from "./rpc/observe-interceptor.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Filled by the observe interceptor (or the HTTP layer for early refusals); read by the request log line. */
    rpcOutcome: RpcOutcome;
    /**
     * The caller established from the headers, before the body is read, or
     * why the call is refused from them (its token, or the call gate); API
     * routes only.
     */
    auth: AuthResult | undefined;
    /** The unary API call's place at the call gate. */
    callPass: CallPass | undefined;
    /** Whether the request's log line is written (finishRequest). */
    finished: boolean;
    /** Work the call stopped waiting for that still runs: its place at the call gate is kept until it ends. */
    abandonedWork: AbandonedWork | undefined;
  }
}

/** What the HTTP server is built from. */
export interface ServerDeps {
  readonly versions: ServiceImpl<typeof EntityVersionsService>;
  readonly access: ServiceImpl<typeof EntityAccessService>;
  readonly events: ServiceImpl<typeof EntityEventsService>;
  readonly authenticator: Authenticator;
  readonly readiness: Readiness;
  readonly metrics: Metrics;
  /** A pino logger. */
  readonly logger: FastifyBaseLogger;
  /** Largest request body accepted, on every protocol. */
  readonly bodyLimitBytes: number;
  /** Streams, idle connections, bodies in flight, deadlines. */
  readonly http: HttpLimits;
  /** How long requests in flight may run once the shutdown begins. */
  readonly shutdownTimeoutMs: number;
  /**
   * When the shutdown began (epoch ms), where the caller ends other things
   * (event watches) before close(): the bound on calls in flight counts
   * from then, so that the whole stop stays within shutdownTimeoutMs.
   * Undefined: it counts from close().
   */
  readonly shutdownBegan?: (() => number | undefined) | undefined;
  /** Whether `GET /metrics` is served on the API's port (no METRICS_PORT of its own). */
  readonly metricsOnApiPort: boolean;
  /** Which RPC calls run in the scope that charges inflated messages (RPC_INFLATION_SCOPE). */
  readonly rpcInflationScope: RpcInflationScope;
}

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/** The request's id: the client's x-request-id when it is a plausible one, else a new UUID. */
function requestIdFor(sent: string | string[] | undefined): string {
  return typeof sent === "string" && requestIdPattern.test(sent) ? sent : randomUUID();
}

/** How long a client whose answer has gone out may take to end the body it was sending before its stream is reset. */
const unreadBodyGraceMs = 100;

/** How much of that body is read and dropped before the stream is reset at once: the default HTTP/2 stream window, what a client may send unasked. */
const unreadBodyGraceBytes = 65_535;

/**
 * Ends an answered HTTP/2 stream whose body was left unread: without this
 * the stream (and its answer's "finish") waits for a body nobody reads.
 * From the answer's end, the rest of the body is read and dropped; once
 * the answer's END_STREAM has gone (nghttp2 sends a reset ahead of DATA
 * frames still queued, so it checks every few milliseconds, for at most a
 * second: a client that stopped reading is reset then), a client that has
 * not ended its body within `unreadBodyGraceMs`, or that sends more than
 * `unreadBodyGraceBytes` of it, is sent RST_STREAM NO_ERROR (RFC 9113,
 * 8.1), so it stops sending. The grace is for a small
 * body sent just after the headers the answer was made from (a refusal,
 * an unknown method): ended, it needs no reset, and some clients drop an
 * answer that a reset follows (curl 7.88 does). Node resets a stream whose
 * body was never read as soon as its answer ends; reading from then on,
 * before Node's own "finish" listener runs, leaves the reset to this.
 */
function endUnreadStream(req: http2.Http2ServerRequest): void {
  const stream = req.stream;
  // Node destroys a stream only once its body has been read to the end
  // (or reset): what is buffered is dropped, so that it, and its answer for
  // the log and metrics, ends now.
  const drop = () => {
    while (stream.read() !== null);
  };
  stream.prependOnceListener("finish", () => {
    if (req.complete) return;
    // What is dropped is bounded too: a client that goes on sending at full
    // speed would otherwise have the server read (and throw away) as much
    // as the grace lets through, per stream.
    let dropped = 0;
    let settled = false;
    const resetNow = () => {
      if (!stream.closed && !stream.destroyed && stream.state.remoteClose !== 1) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    };
    stream.on("data", (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped <= unreadBodyGraceBytes) return;
      stream.pause();
      // Node hands a chunk over before it marks the stream ended by the same
      // frame: a body that ends here may be reset too, which the protocol allows.
      if (settled) resetNow();
    });
    stream.resume();
    const giveUpAt = Date.now() + 1000;
    const settle = () => {
      if (stream.closed || stream.destroyed) return;
      if (stream.state.localClose !== 1 && Date.now() < giveUpAt) {
        setTimeout(settle, 2);
        return;
      }
      settled = true;
      drop();
      if (stream.state.remoteClose === 1) return;
      if (dropped > unreadBodyGraceBytes) {
        resetNow();
        return;
      }
      const timer = setTimeout(() => {
        if (stream.closed || stream.destroyed) return;
        resetNow();
        drop();
      }, unreadBodyGraceMs);
      stream.once("close", () => clearTimeout(timer));
    };
    setImmediate(settle);
  });
}

/**
 * Gives up on an answer its client is not taking: an HTTP/2 stream is
 * reset (CANCEL), so the client may retry it; an HTTP/1.1 answer can be
 * stopped only with its connection.
 */
function dropAnswer(of: http.ServerResponse | http2.Http2ServerResponse | http.IncomingMessage | http2.Http2ServerRequest): void {
  // Named by its request too: where Connect's context values are made, the reply is not at hand.
  if (of instanceof http2.Http2ServerResponse || of instanceof http2.Http2ServerRequest) {
    if (!of.stream.destroyed) of.stream.close(http2.constants.NGHTTP2_CANCEL);
  } else {
    of.socket?.destroy();
  }
}

/** What is left of the deadline the request's client set (in its protocol's header: deadlineHeader), counted from its arrival; undefined when it set none. */
function clientDeadlineLeftMs(req: FastifyRequest, reply: FastifyReply): number | undefined {
  const name = deadlineHeader(req.headers["content-type"], isRpcPath(req.url.split("?", 1)[0]!));
  const value = req.headers[name];
  const client = clientTimeoutMs(name, Array.isArray(value) ? value[0] : value);
  return client === undefined ? undefined : Math.max(0, client - reply.elapsedTime);
}

/**
 * The largest request message of the services whose calls stay open
 * (events, health, reflection): a few names and a page token each.
 */
const smallMessageBytes = 16 * 1024;

/** A request's connection: its socket, or for HTTP/2 its session, whose streams share what the connection may hold. */
function connectionOf(req: FastifyRequest): object {
  return req.raw instanceof http2.Http2ServerRequest ? (req.raw.stream.session ?? req.raw.socket) : req.raw.socket;
}

/** How many Authorization headers the request carries, as sent (Node's parsed headers keep only the first). */
function authorizationHeaders(req: FastifyRequest): number {
  const raw = req.raw.rawHeaders;
  let count = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === 13 && raw[i]!.toLowerCase() === "authorization") count++;
  return count;
}

/**
 * Has an HTTP/1.1 connection close after this answer: by shouldKeepAlive,
 * on which Node writes Connection: close, rather than by the header alone,
 * so that the one-port server does not run a request pipelined behind it
 * (whose answer would never be sent).
 */
function closeHttp1After(res: http.ServerResponse): void {
  res.shouldKeepAlive = false;
}

/**
 * Ends the connection once this answer is written: an HTTP/2 session gets
 * GOAWAY (its other streams finish), HTTP/1.1 answers with Connection: close.
 */
function closeConnectionAfter(req: FastifyRequest, reply: FastifyReply): void {
  if (req.raw instanceof http2.Http2ServerRequest) req.raw.stream.session?.close();
  else closeHttp1After(reply.raw as http.ServerResponse);
}

/** The RPC route config of a request, when its route serves an RPC. */
function rpcRoute(req: FastifyRequest): RpcRouteConfig | undefined {
  const config = req.routeOptions.config as Partial<RpcRouteConfig> | undefined;
  return config?.rpc === undefined ? undefined : (config as RpcRouteConfig);
}

/**
 * Builds the HTTP server: one Fastify instance on one port serving gRPC,
 * gRPC-Web and Connect (from the Connect router) and REST JSON (from the
 * google.api.http rules), every call through the same interceptors — the
 * same metrics, error catalog, deadlines and authentication — plus gRPC
 * health and reflection, /healthz, /readyz and /metrics. The caller
 * listens; tests use port 0 or inject.
 *
 * Before any request body is read, the API routes authenticate the call
 * from its headers; every body is then read against its connection's and
 * the process's byte budget and a deadline, so no client, authenticated or
 * not, can make the process hold more than the budget.
 */
export async function buildServer(deps: ServerDeps): Promise<FastifyInstance> {
  const { http: limits } = deps;
  // Requests the one-port server refused as their body came (its chunked
  // framing broken), after the handler had them, and how.
  const refusedInBody = new WeakMap<object, { code: string; reason: string | undefined; status: number }>();
  // Fastify's types know only its own server kinds; the one-port server is
  // an HTTP/1.1 server to Fastify, with HTTP/2 requests as compatible objects.
  const app: FastifyInstance = Fastify({
    serverFactory: ((handler: RequestHandler) =>
      createOnePortServer(handler, {
        maxConcurrentStreams: limits.maxConcurrentStreams,
        idleTimeoutMs: limits.idleTimeoutMs,
        maxConnections: limits.maxConnections,
        onResetFlood: (peer: { address: string | undefined; port: number | undefined }) =>
          deps.logger.warn({ peer: peer.address, peerPort: peer.port }, "HTTP/2 session closed (GOAWAY ENHANCE_YOUR_CALM): its client reset streams faster than the server lets it (rapid reset)"),
        // Refused before Fastify sees them, so before the hooks that log
        // every request: logged here, as they would.
        unreadable: (request: UnreadableRequest) => {
          const refusal =
            request.kind === "too-large" ? apiError("REQUEST_HEADERS_TOO_LARGE", { limitBytes: request.limitBytes }) : apiError("MALFORMED_REQUEST", { problem: request.problem });
          const answer = renderRestError(refusal);
          const reason = reasonOf(refusal);
          // One the handler had: its log line (and its count) is this one,
          // rather than the 499 of an answer never sent (finishRequest).
          const given = request.kind === "malformed" ? request.request : undefined;
          if (given !== undefined) refusedInBody.set(given, { code: codeName(refusal.code), reason, status: answer.status });
          deps.logger.info({ ...(given === undefined ? {} : { method: shown(given.method ?? ""), path: shownPath(given.url ?? "") }), reason, status: answer.status }, "request");
          return answer;
        },
      })) as unknown as FastifyServerFactory,
    loggerInstance: deps.logger,
    bodyLimit: deps.bodyLimitBytes,
    // One log line per request comes from the onResponse hook below.
    logController: new LogController({ disableRequestLogging: true }),
    // Requests that arrive while closing are served (their connection then
    // closes), rather than refused with a body outside the error catalog.
    return503OnClosing: false,
    // Path values are validated by the service (entity ids up to 128
    // characters); past this, Fastify refuses the URL via frameworkErrors.
    routerOptions: { maxParamLength: 512 },
    // Refused before routing, so before the hooks that name and log every
    // request: named and logged here, as they would.
    frameworkErrors: (error, req, reply) => {
      const refusal =
        error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? apiError("INVALID_ARGUMENT", { field: "path", problem: "a path segment is longer than 512 characters" })
          : apiError("MALFORMED_REQUEST", { problem: `the URL ${shownPath(req.url)}${req.url.includes("?") ? "?…" : ""} is not valid: percent-encode it as RFC 3986 says (a "%" that starts no escape is written %25)` });
      // Its body is unread: the next request on an HTTP/1.1 connection
      // could not be told from it (as the onSend hook does, which this
      // answer does not pass through).
      if (!(req.raw instanceof http2.Http2ServerRequest) && !req.raw.complete) closeHttp1After(reply.raw as http.ServerResponse);
      void sendRestError(reply as unknown as FastifyReply, refusal, { "x-request-id": req.id });
      req.log.info({ method: shown(req.method), path: shownPath(req.url), reason: reasonOf(refusal), status: reply.statusCode }, "request");
    },
    requestIdHeader: false,
    genReqId: (req) => requestIdFor(req.headers["x-request-id"]),
  });

  // The methods of each fixed path (health, docs, metrics), so that one
  // called with another method is answered 405 with Allow, as the API's
  // routes are, rather than 404 as if the path did not exist.
  const fixedPathMethods = new Map<string, string[]>();
  app.addHook("onRoute", (route) => {
    if (/[:*]/.test(route.url)) return;
    const methods = fixedPathMethods.get(route.url) ?? [];
    for (const method of [route.method].flat()) if (!methods.includes(method)) methods.push(method);
    fixedPathMethods.set(route.url, methods);
  });

  const budget = new BodyBudget({ perConnection: limits.maxConnectionBufferedBytes, total: limits.maxBufferedBytes });
  const gate = new CallGate({
    perConnection: limits.maxCallsPerConnection,
    total: limits.maxCallsInFlight,
    queued: limits.maxCallsQueued,
    perCaller: limits.maxCallsPerCaller,
  });
  // Answers ready whose clients have not taken them yet, and by when they
  // must have: a sweep drops those past it. One sweep rather than a timer
  // per call: a call answered at once, the common case, then costs a map
  // entry and no timer.
  const untaken = new Map<http.ServerResponse | http2.Http2ServerResponse, number>();
  const sweepUntaken = setInterval(() => {
    const now = Date.now();
    for (const [res, by] of untaken) {
      if (by > now) continue;
      untaken.delete(res);
      dropAnswer(res);
    }
  }, Math.min(1000, limits.responseTimeoutMs));
  sweepUntaken.unref();
  app.addHook("onClose", (_instance, done) => {
    clearInterval(sweepUntaken);
    done();
  });
  /**
   * Starts the clock on an answer that is ready: dropped unless its client
   * takes it within responseTimeoutMs, plus a second for every 64 KiB
   * past the first (a large file). Every API call's answer, and over HTTP/2
   * every other answer but a stream's (which has keep-alives and caps of
   * its own), so that no client holds a connection, or the memory of an
   * answer, by never reading: a probe's, the metrics', the docs' files, a 404's.
   */
  const awaitTaken = (reply: FastifyReply, bytes = 0): void => {
    const res = reply.raw;
    if (res.writableFinished || res.destroyed) return;
    const by = Date.now() + limits.responseTimeoutMs + Math.floor(bytes / 65_536) * 1000;
    const since = untaken.get(res);
    // Already on the clock (an API call's, from its place at the gate): its size, known now, may only give it longer.
    if (since !== undefined) {
      if (by > since) untaken.set(res, by);
      return;
    }
    untaken.set(res, by);
    res.once("close", () => untaken.delete(res));
  };
  /**
   * How much longer a call may wait before it runs (for its place, for its
   * token's check): the server's default deadline, or what is left of its
   * client's own when that is shorter, counted from the call's arrival.
   */
  const waitLimitMs = (req: FastifyRequest, reply: FastifyReply): number => {
    const client = clientDeadlineLeftMs(req, reply);
    return client === undefined ? limits.defaultDeadlineMs : Math.min(limits.defaultDeadlineMs, client);
  };
  /**
   * A unary call's place at the gate: at once, after waiting its turn (at
   * most waitLimitMs; a client that leaves stops waiting), or a refusal
   * ("client deadline" when its client's deadline passed while it
   * waited). The place is given back when the answer is done and the work
   * it abandoned has ended (AbandonedWork); an answer
   * the client does not take within `responseTimeoutMs` of the handler's
   * return is dropped, so that a client that never reads (an HTTP/2 flow
   * control window left at 0, a full TCP window) cannot hold places.
   */
  const admit = async (req: FastifyRequest, reply: FastifyReply): Promise<CallPass | CallRefusal | "client deadline"> => {
    const entry = gate.enter(connectionOf(req));
    if (isRefusal(entry)) return entry;
    let pass = isWait(entry) ? undefined : entry;
    let closed = false;
    reply.raw.once("close", () => {
      closed = true;
      untaken.delete(reply.raw);
      if (pass !== undefined) pass.responded();
      else if (isWait(entry)) entry.cancel();
    });
    const delivered = (inner: CallPass): CallPass => ({
      begin: () => inner.begin(),
      end: () => {
        if (!closed) awaitTaken(reply);
        // Answered, but what it stopped waiting for (a transaction behind
        // a row lock, a place in the pool's queue) keeps its place until
        // it ends, at most a default deadline more.
        const lingering = req.abandonedWork?.ended(limits.defaultDeadlineMs);
        if (lingering === undefined) inner.end();
        else void lingering.then(() => inner.end());
      },
      responded: () => inner.responded(),
      claim: (callerId) => inner.claim(callerId),
    });
    if (!isWait(entry)) return delivered(entry);
    const limitMs = waitLimitMs(req, reply);
    let waitedOut = false;
    const timer = setTimeout(() => {
      waitedOut = true;
      entry.cancel();
    }, limitMs);
    const admitted = await entry.admitted;
    clearTimeout(timer);
    // Its client's deadline passed while it waited: nothing to run.
    if (isRefusal(admitted)) return waitedOut && limitMs < limits.defaultDeadlineMs ? "client deadline" : admitted;
    pass = admitted;
    if (closed) admitted.responded();
    return delivered(admitted);
  };
  const bodyGuard = (req: FastifyRequest, reply: FastifyReply): BodyGuard => {
    const ticket = budget.open(connectionOf(req));
    const answered = new Promise<void>((resolve) =>
      reply.raw.once("close", () => {
        ticket.close();
        resolve();
      }),
    );
    return { ticket, timeoutMs: limits.bodyTimeoutMs, deadlineMs: clientDeadlineLeftMs(req, reply), answered };
  };
  // Calls still running shutdownTimeoutMs after the shutdown began are
  // aborted (SHUTTING_DOWN), whatever their protocol.
  const shutdown = new AbortController();
  // Every call in flight listens to it (Connect links it into the call's
  // signal): more than Node's default of ten is normal, not a leak.
  setMaxListeners(0, shutdown.signal);
  // Aborted as close() begins (after the drain): what only ends when told
  // to (health Watches) ends then, SHUTTING_DOWN.
  const closing = new AbortController();
  setMaxListeners(0, closing.signal);
  app.addHook("preClose", (done) => {
    closing.abort(apiError("SHUTTING_DOWN", {}));
    const began = deps.shutdownBegan?.() ?? Date.now();
    setTimeout(() => shutdown.abort(apiError("SHUTTING_DOWN", {})), Math.max(0, began + deps.shutdownTimeoutMs - Date.now())).unref();
    done();
  });

  // Outermost first: observe sees the catalog error the client gets.
  const everyCall: Interceptor[] = [observeInterceptor(deps.metrics), errorInterceptor(app.log), deadlineInterceptor(limits.defaultDeadlineMs)];
  const openInterceptors: Interceptor[] = [...everyCall, openStreamsInterceptor({ max: limits.maxOpenStreams, untakenMs: limits.responseTimeoutMs })];
  // Innermost: the signal it watches is the one the implementation is given.
  const apiInterceptors: Interceptor[] = [...everyCall, authInterceptor(deps.authenticator), abandonedWorkInterceptor()];
  const apiServices = [EntityVersionsService, EntityAccessService, EntityEventsService];
  const specs = [
    createServiceImplSpec<typeof EntityVersionsService>(EntityVersionsService, deps.versions),
    createServiceImplSpec<typeof EntityAccessService>(EntityAccessService, deps.access),
    createServiceImplSpec<typeof EntityEventsService>(EntityEventsService, deps.events),
  ];
  // The request's logger: a cause logged for a 5xx carries the reqId its answer's x-request-id names.
  const toError = (error: unknown, rpc: string, req: FastifyRequest): ConnectError => toCatalogError(error, req.log, rpc);
  const contextValues = (req: FastifyRequest) => {
    const route = rpcRoute(req);
    if (route?.gateway === "rest") req.rpcOutcome.protocol = "rest";
    const values = createContextValues().set(rpcOutcomeKey, req.rpcOutcome).set(requestLogKey, req.log);
    if (req.callPass !== undefined) values.set(abandonedWorkKey, (req.abandonedWork ??= new AbandonedWork()));
    if (route?.authenticate === false) {
      // The streams that need no token are shared out by address, and
      // dropped when their clients stop taking them (openStreamsInterceptor).
      values.set(peerKey, req.raw.socket?.remoteAddress);
      values.set(dropAnswerKey, () => dropAnswer(req.raw));
    }
    return req.auth === undefined ? values : values.set(authResultKey, req.auth);
  };
  const refused = (req: FastifyRequest) => req.auth !== undefined && "error" in req.auth;

  app.decorateRequest("rpcOutcome", null as unknown as RpcOutcome);
  app.decorateRequest("auth", undefined);
  app.decorateRequest("callPass", undefined);
  app.decorateRequest("abandonedWork", undefined);
  app.decorateRequest("finished", false);
  app.addHook("onRequest", async (req, reply) => {
    req.rpcOutcome = {};
    reply.header("x-request-id", req.id);
    // Fastify runs onResponse once an answer is written; one whose
    // HTTP/1.1 client left first never is, and is finished here.
    reply.raw.once("close", () => {
      if (!reply.raw.writableEnded) finishRequest(req, reply);
    });
    noteClose(reply.raw);
    if (req.raw instanceof http2.Http2ServerRequest) endUnreadStream(req.raw);
    const route = rpcRoute(req);
    // Let in first, before its token or body costs anything.
    if (route?.authenticate === true && route.unary) {
      const entry = await admit(req, reply);
      if (entry === "client deadline") {
        req.auth = { error: apiError("DEADLINE_EXCEEDED", {}) };
        return;
      }
      if (isRefusal(entry)) {
        req.auth = { error: apiError("TOO_MANY_CALLS", entry) };
        // One connection with this many calls running is a client not
        // waiting for its answers (pipelining, or resetting streams).
        if (entry.scope === "connection") closeConnectionAfter(req, reply);
        return;
      }
      req.callPass = entry;
    }
    // From the headers alone, before any body is read: a caller who may
    // not call costs the server no body. Bounded like the call itself.
    if (route?.authenticate === true) {
      const header = req.headers.authorization ?? null;
      const known = deps.authenticator.known?.(header);
      const headers = authorizationHeaders(req);
      if (headers > 1) {
        // Node keeps the first of several and drops the rest unseen; a
        // proxy in front may have judged by another one.
        req.auth = { error: apiError("TOKEN_MALFORMED", { problem: `The request carries ${headers} Authorization headers` }) };
      } else if (known !== undefined) {
        req.auth = { caller: known };
      } else {
        const bound = deadlineSignal(shutdown.signal, waitLimitMs(req, reply), () => apiError("DEADLINE_EXCEEDED", {}));
        try {
          req.auth = await authenticateHeader(deps.authenticator, header, bound.signal);
        } finally {
          bound.dispose();
        }
      }
      // One caller's share of the places, however many connections it uses.
      if (req.callPass !== undefined && "caller" in req.auth && !req.callPass.claim(req.auth.caller.id)) {
        req.auth = { error: apiError("TOO_MANY_CALLS", { scope: "caller", limit: limits.maxCallsPerCaller }) };
      }
      // A call refused from its headers (no valid token, or its caller
      // over its share) is answered a few hundred bytes, with no work
      // behind it: its place goes back now rather than once its client
      // takes the answer, so that clients with no token, or past their
      // share, cannot hold the places other callers need by never reading.
      // Its answer is still dropped if not taken within responseTimeoutMs.
      if (req.callPass !== undefined && "error" in req.auth) {
        req.callPass.responded();
        req.callPass = undefined;
        awaitTaken(reply);
      }
    }
  });
  // Every body Fastify's parsers read is guarded as Connect's are: a REST
  // call's, and one sent to a path no route serves (its 404 or 405 is
  // answered once the body is parsed), which needs no token. Connect reads
  // its own bodies; Fastify reads no body of a GET or HEAD (one announced
  // is refused from the headers), so theirs needs no guard.
  app.addHook("preParsing", async (req, reply, payload) => {
    const route = rpcRoute(req);
    if (route?.gateway === "connect" || req.method === "GET" || req.method === "HEAD") return payload;
    // Read as it came, a compressed body would be refused as malformed
    // JSON; RFC 9110 (15.5.16) answers an unsupported coding 415.
    const encoding = req.headers["content-encoding"]?.trim().toLowerCase();
    if (route?.gateway === "rest" && encoding !== undefined && encoding !== "" && encoding !== "identity") {
      throw apiError("UNSUPPORTED_CONTENT_ENCODING", { contentEncoding: encoding });
    }
    const body = Readable.from(guardedBody(payload, bodyGuard(req, reply)), { objectMode: false });
    // Fastify stops listening once a body passes its limit; an error after
    // that (the client's connection failing) must not be an unhandled one.
    body.on("error", (error) => req.log.debug({ err: error }, "request body failed after it was no longer read"));
    return body;
  });
  app.addHook("onSend", async (req, reply, payload) => {
    // The answer is ready now. Put on the clock: over HTTP/2, every answer
    // but a stream's (a REST watch); over HTTP/1.1, only an API call's,
    // already there from its place at the gate, whose size is known only
    // here. Others over HTTP/1.1 are left to the connection's own timeout
    // (one-port-server), which cuts an answer whose sending stopped and lets
    // one taken slowly go on, as a browser on a slow link needs (browsers
    // speak HTTP/2 only over TLS, so always HTTP/1.1 here).
    const route = req.routeOptions.config as Partial<RpcRouteConfig>;
    if (route.unary !== false && (req.raw instanceof http2.Http2ServerRequest || untaken.has(reply.raw))) {
      const length = typeof payload === "string" || Buffer.isBuffer(payload) ? Buffer.byteLength(payload) : Number(reply.getHeader("content-length") ?? 0);
      awaitTaken(reply, Number.isFinite(length) ? length : 0);
    }
    // HTTP/1.1 cannot read the next request on this connection before the
    // rest of an unread body: close the connection after this answer.
    if (!(req.raw instanceof http2.Http2ServerRequest)) {
      // (Fastify's own Connection: close on a body its parser refused is one too.)
      if (!req.raw.complete || /\bclose\b/i.test(String(reply.getHeader("connection") ?? ""))) closeHttp1After(reply.raw as http.ServerResponse);
    } else if (reply.hasHeader("connection")) {
      // HTTP/2 has no such header (Fastify sets it on a body its parser
      // refused): Node would drop it with a process warning.
      reply.removeHeader("connection");
    }
    return payload;
  });
  app.addHook("onResponse", async (req, reply) => finishRequest(req, reply));
  /** Counts a call no interceptor recorded, and writes the request's one log line. */
  function finishRequest(req: FastifyRequest, reply: FastifyReply): void {
    if (req.finished) return;
    req.finished = true;
    const o = req.rpcOutcome;
    const route = rpcRoute(req);
    // The client went away before its answer was written (an HTTP/2
    // stream it reset ends the response too): the call may still be
    // running, and whatever it answers reaches nobody.
    const gone = !reply.raw.writableEnded;
    // Refused by the one-port server as its body came: its client got that
    // refusal, and its log line is already written.
    const refusedAs = gone ? refusedInBody.get(req.raw) : undefined;
    // A call refused before any interceptor saw it, or cut off by its
    // client, is counted here (once: see recordRpc).
    if (route !== undefined && o.rpc === undefined) {
      recordRpc(deps.metrics, o, {
        rpc: route.rpc,
        protocol: o.protocol ?? (route.gateway === "rest" ? "rest" : protocolOf(req.headers["content-type"])),
        code: refusedAs?.code ?? o.code ?? (gone ? "canceled" : "unknown"),
        reason: refusedAs === undefined ? o.reason : refusedAs.reason,
        seconds: reply.elapsedTime / 1000,
      });
    }
    if (refusedAs !== undefined) return;
    req.log.info(
      {
        method: shown(req.method),
        path: shownPath(req.url),
        // A call its client left may still be running: canceled is what its client got.
        ...(o.rpc === undefined ? {} : { rpc: o.rpc, protocol: o.protocol, code: o.code ?? (gone ? "canceled" : undefined) }),
        ...(o.reason === undefined ? {} : { reason: o.reason }),
        // nginx's 499: the client closed the request before the answer.
        status: gone ? 499 : reply.statusCode,
        durationMs: Math.round(reply.elapsedTime * 100) / 100,
      },
      "request",
    );
  }

  app.setErrorHandler((error: FastifyError, req, reply) => {
    const status = error.statusCode ?? 500;
    const apiErr =
      error instanceof ConnectError && reasonOf(error) !== undefined
        ? error
        : status === 415
          ? apiError("UNSUPPORTED_MEDIA_TYPE", { contentType: req.headers["content-type"] ?? "(none)" })
          : status === 413
            ? apiError("REQUEST_TOO_LARGE", { limitBytes: deps.bodyLimitBytes })
            : status >= 400 && status < 500
              ? apiError("MALFORMED_REQUEST", { problem: error.message })
              : toError(error, `${shown(req.method)} ${shownPath(req.url)}`, req);
    noteRefusal(req.rpcOutcome, apiErr);
    return sendRestError(reply, apiErr);
  });

  const rpcMethods = new Map<string, readonly string[]>();
  const connectOptions = {
    methodsByPath: rpcMethods,
    contextValues,
    callPass: (req: FastifyRequest) => req.callPass,
    answerReady: (_req: FastifyRequest, reply: FastifyReply) => awaitTaken(reply),
    outcome: (req: FastifyRequest) => req.rpcOutcome,
    refused,
    log: app.log,
    inflationScope: deps.rpcInflationScope,
    refuse: (req: FastifyRequest, error: ConnectError) => {
      req.auth = { error };
    },
    bodyGuard,
    readMaxBytes: deps.bodyLimitBytes,
    // The protobuf JSON mapping's default, which REST follows too: a
    // misspelt field is refused rather than dropped (a misspelt
    // base_version_id would otherwise become a STALE_BASE).
    jsonOptions: { ignoreUnknownFields: false },
    shutdownSignal: shutdown.signal,
  };
  /** One Connect plugin: its services' routes, who may call them, and how large a message they take. */
  const serveConnect = (authenticate: boolean, interceptors: Interceptor[], readMaxBytes: number, routes: (router: ConnectRouter) => void) =>
    app.register(connectRoutes, { ...connectOptions, authenticate, interceptors, readMaxBytes, routes });
  await serveConnect(true, apiInterceptors, deps.bodyLimitBytes, (router) => {
    router.service(EntityVersionsService, deps.versions);
    router.service(EntityAccessService, deps.access);
  });
  // Streams hold what they were sent, and what it may inflate to, for as
  // long as they stay open: watches for hours. Their requests are a few
  // names, so their messages are held to streamReadMaxBytes, and so are
  // health's and reflection's, which need no token.
  const streamReadMaxBytes = Math.min(deps.bodyLimitBytes, smallMessageBytes);
  await serveConnect(true, apiInterceptors, streamReadMaxBytes, (router) => router.service(EntityEventsService, deps.events));
  // Health and reflection answer without a token: load balancers and tools.
  await serveConnect(false, openInterceptors, streamReadMaxBytes, (router) => {
    router.service(Health, new HealthService(deps.readiness, apiServices, { closing: closing.signal }));
    const reflection = new ReflectionService(
      [...apiServices, Health, ServerReflection, ServerReflectionV1alpha].map((s) => s.typeName),
      [
        file_entityversions_v1_entity_versions,
        file_entityversions_v1_entity_access,
        file_entityversions_v1_entity_events,
        file_grpc_health_v1_health,
        file_grpc_reflection_v1_reflection,
        file_grpc_reflection_v1alpha_reflection,
        // The error details every error carries, so tools can decode them.
        file_google_rpc_error_details,
      ],
    );
    router.service(ServerReflection, reflection);
    router.service(ServerReflectionV1alpha, reflection.v1alpha());
  });
  const restRoutes = registerRestGateway(app, {
    services: apiServices,
    call: createInProcessCaller(specs, apiInterceptors),
    callStream: createInProcessStreamCaller(specs, apiInterceptors),
    contextValues,
    outcome: (req) => req.rpcOutcome,
    refused,
    callPass: (req) => req.callPass,
    shutdownSignal: shutdown.signal,
    successStatus,
    toError,
    // Read as every body is read: a client that neither sends nor ends its
    // body is answered at the body timeout or its deadline, not held.
    bodyArrives: async (req, reply) => {
      // The body also ends when the response closes unanswered: a client gone, whose call must not start.
      let gone = false;
      const onClose = () => (gone = !reply.raw.writableEnded);
      reply.raw.once("close", onClose);
      try {
        for await (const chunk of guardedBody(req.raw, bodyGuard(req, reply))) if (chunk.byteLength > 0) return true;
      } finally {
        reply.raw.off("close", onClose);
      }
      if (gone) throw new ConnectError("the client went away", Code.Canceled);
      return false;
    },
  });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?", 1)[0]!;
    const apiAllowed = rpcMethods.get(path) ?? restRoutes.allowedMethods(path);
    const allowed = apiAllowed.length > 0 ? apiAllowed : (fixedPathMethods.get(path) ?? []);
    if (allowed.length > 0) {
      const refusal = apiError("METHOD_NOT_ALLOWED", { method: shown(req.method), path: shownPath(path), allowed: allowed.join(", ") });
      // A Connect GET of a method with side effects: its client reads Connect's error JSON.
      if (rpcMethods.has(path) && isConnectGet(req.method, req.url)) {
        return reply.code(405).headers({ allow: allowed.join(", "), "content-type": "application/json" }).send(connectErrorJson(refusal));
      }
      return sendRestError(reply, refusal, { allow: allowed.join(", ") });
    }
    const rpc = unknownMethodAnswer(req.method, req.url, req.headers["content-type"]);
    if (rpc !== undefined && rpc.body === "") {
      sendTrailersOnly(reply, rpc.status, Object.entries(rpc.headers));
      return reply;
    }
    if (rpc !== undefined) return reply.code(rpc.status).headers(rpc.headers).send(rpc.body);
    return sendRestError(reply, apiError("ROUTE_NOT_FOUND", { method: shown(req.method), path: shownPath(path) }));
  });
  registerOpenApiRoutes(app);
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_req, reply) => {
    const report = await deps.readiness.check();
    return reply.code(report.ready ? 200 : 503).send({ status: report.ready ? "ready" : "not ready", checks: report.checks });
  });
  if (deps.metricsOnApiPort) {
    const renderMetrics = metricsRenderer(deps.metrics);
    app.get("/metrics", async (_req, reply) => {
      return reply.type(deps.metrics.registry.contentType).send(await renderMetrics());
    });
  }
  return app;
}

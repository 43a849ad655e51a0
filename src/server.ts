import { randomUUID } from "node:crypto";
import { type ConnectError, type ConnectRouter, createContextValues, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
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
import { EntityVersionsService, file_entityversions_v1_entity_versions } from "../gen/entityversions/v1/entity_versions_pb.js";
import { file_grpc_health_v1_health, Health } from "../gen/grpc/health/v1/health_pb.js";
import { file_grpc_reflection_v1_reflection, ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { type Authenticator, authInterceptor } from "./auth/caller.js";
import { apiError } from "./errors/api-error.js";
import { createOnePortServer, type RequestHandler } from "./net/one-port-server.js";
import { HealthService } from "./ops/health-service.js";
import { lazyChildLoggerFactory } from "./ops/lazy-child-logger.js";
import type { Metrics } from "./ops/metrics.js";
import type { Readiness } from "./ops/readiness.js";
import { ReflectionService } from "./ops/reflection-service.js";
import { renderRestError } from "./rest/rest-error.js";
import { registerOpenApiRoutes } from "./rest/openapi-routes.js";
import { registerRestGateway } from "./rest/rest-gateway.js";
import { successStatus } from "./rest/success-status.js";
import { errorInterceptor, toCatalogError } from "./rpc/error-interceptor.js";
import { relabelDecodeErrors } from "./rpc/decode-errors.js";
import { grpcUnaryStreamHandler, type StreamClaim } from "./rpc/grpc-unary-stream.js";
import { createInProcessCaller, type ServiceRegistration } from "./rpc/in-process-caller.js";
import { observeInterceptor, type RpcOutcome, rpcOutcomeKey } from "./rpc/observe-interceptor.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Filled by the observe interceptor; read by the request log line. */
    rpcOutcome: RpcOutcome;
  }
}

/** What the HTTP server is built from. */
export interface ServerDeps {
  readonly versions: ServiceImpl<typeof EntityVersionsService>;
  readonly access: ServiceImpl<typeof EntityAccessService>;
  readonly authenticator: Authenticator;
  readonly readiness: Readiness;
  readonly metrics: Metrics;
  /** A pino logger. */
  readonly logger: FastifyBaseLogger;
  /** Largest request body accepted, on every protocol. */
  readonly bodyLimitBytes: number;
  /** How long requests in flight may run once close() begins. */
  readonly shutdownTimeoutMs: number;
}

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/** The request's id: the client's x-request-id when it is a plausible one, else a new UUID. */
function requestIdFor(sent: string | string[] | undefined): string {
  return typeof sent === "string" && requestIdPattern.test(sent) ? sent : randomUUID();
}

/** The fields of the one log line per request, whichever path answered it. */
function requestLogFields(method: string, path: string, o: RpcOutcome, status: number, durationMs: number): Record<string, unknown> {
  return {
    method,
    path,
    ...(o.rpc === undefined ? {} : { rpc: o.rpc, protocol: o.protocol, code: o.code }),
    ...(o.reason === undefined ? {} : { reason: o.reason }),
    status,
    durationMs: Math.round(durationMs * 100) / 100,
  };
}

/**
 * Builds the HTTP server: one Fastify instance on one port serving gRPC,
 * gRPC-Web and Connect (from the Connect router) and REST JSON (from the
 * google.api.http rules), every protocol through the same interceptors and
 * the same error catalog; plus gRPC health and reflection, /healthz,
 * /readyz, /metrics, and the REST API's OpenAPI document and reference
 * page. The caller listens; tests use port 0 or inject.
 */
export async function buildServer(deps: ServerDeps): Promise<FastifyInstance> {
  // Unary gRPC calls, answered on their HTTP/2 streams; set once the
  // in-process caller exists, below.
  let claimStream: StreamClaim | undefined;
  // Fastify's types know only its own server kinds; the one-port server is
  // an HTTP/1.1 server to Fastify, with HTTP/2 requests as compatible objects.
  const app: FastifyInstance = Fastify({
    serverFactory: ((handler: RequestHandler) =>
      createOnePortServer(handler, { claimStream: (stream, headers) => claimStream?.(stream, headers) ?? false })) as unknown as FastifyServerFactory,
    loggerInstance: deps.logger,
    bodyLimit: deps.bodyLimitBytes,
    // One log line per request comes from the onResponse hook below.
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: lazyChildLoggerFactory,
    // Requests that arrive while closing are served (their connection then
    // closes), rather than refused with a body outside the error catalog.
    return503OnClosing: false,
    // Path values are validated by the service (entity ids up to 128
    // characters); past this, Fastify refuses the URL via frameworkErrors.
    routerOptions: { maxParamLength: 512 },
    frameworkErrors: (error, req, reply) => {
      const rendered = renderRestError(
        error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? apiError("INVALID_ARGUMENT", { field: "path", problem: "a path segment is longer than 512 characters" })
          : apiError("MALFORMED_REQUEST", { problem: `the URL ${req.url.slice(0, 200)} is not valid` }),
      );
      void (reply as unknown as FastifyReply).code(rendered.status).send(rendered.body);
    },
    requestIdHeader: false,
    genReqId: (req) => requestIdFor(req.headers["x-request-id"]),
  });

  const observe = observeInterceptor(deps.metrics);
  const errors = errorInterceptor(app.log);
  const apiInterceptors: Interceptor[] = [observe, errors, authInterceptor(deps.authenticator)];
  const services: ServiceRegistration[] = [
    { service: EntityVersionsService, impl: deps.versions as never },
    { service: EntityAccessService, impl: deps.access as never },
  ];
  const toError = (error: unknown, rpc: string): ConnectError => toCatalogError(error, app.log, rpc);
  const contextValues = (req: FastifyRequest) => createContextValues().set(rpcOutcomeKey, req.rpcOutcome);

  // REST takes JSON only; Fastify's default text/plain parser would let a
  // plain-text body through to a confusing "must be a JSON object".
  app.removeContentTypeParser("text/plain");
  app.decorateRequest("rpcOutcome", null as unknown as RpcOutcome);
  // Callback hooks: an async hook costs a promise per request.
  app.addHook("onRequest", (req, reply, done) => {
    req.rpcOutcome = {};
    reply.header("x-request-id", req.id);
    done();
  });
  app.addHook("onResponse", (req, reply, done) => {
    const o = req.rpcOutcome;
    // Through the root logger with the id as a field, as the request's
    // child would bind it, so that the request's (lazy) child is not made;
    // through the request's own logger on a route with a log level of its own.
    const log = req.routeOptions.logLevel === undefined || req.routeOptions.logLevel === deps.logger.level ? deps.logger : req.log;
    const fields = requestLogFields(req.method, req.url.split("?")[0]!, o, reply.statusCode, reply.elapsedTime);
    log.info(log === deps.logger ? { reqId: req.id, ...fields } : fields, "request");
    done();
  });

  app.setErrorHandler((error: FastifyError, req, reply) => {
    const status = error.statusCode ?? 500;
    const apiErr =
      status === 415
        ? apiError("UNSUPPORTED_MEDIA_TYPE", { contentType: req.headers["content-type"] ?? "(none)" })
        : status === 413
          ? apiError("REQUEST_TOO_LARGE", { limitBytes: deps.bodyLimitBytes })
          : status >= 400 && status < 500
            ? apiError("MALFORMED_REQUEST", { problem: error.message })
            : toError(error, `${req.method} ${req.url.split("?")[0]}`);
    const rendered = renderRestError(apiErr);
    return reply.code(rendered.status).headers(rendered.headers).send(rendered.body);
  });
  app.setNotFoundHandler((req, reply) => {
    const rendered = renderRestError(apiError("ROUTE_NOT_FOUND", { method: req.method, path: req.url.split("?")[0]! }));
    return reply.code(rendered.status).send(rendered.body);
  });

  const call = createInProcessCaller(services, apiInterceptors);
  claimStream = grpcUnaryStreamHandler({
    services,
    call,
    readMaxBytes: deps.bodyLimitBytes,
    requestId: requestIdFor,
    toError,
    // The same line as the onResponse hook's; a client gone before the
    // answer is logged with nginx's 499.
    onDone: ({ requestId, path, outcome, durationMs, answered }) =>
      deps.logger.info({ reqId: requestId, ...requestLogFields("POST", path, outcome, answered ? 200 : 499, durationMs) }, "request"),
    onError: (error) => deps.logger.error({ err: error }, "answering a gRPC call failed"),
  });

  // Counted as the interceptor would have, had it seen the call.
  const onRelabel = (handler: { service: { typeName: string }; method: { name: string } }, protocol: string) =>
    deps.metrics.rpcRequests.inc({ rpc: `${handler.service.typeName}/${handler.method.name}`, protocol, code: "invalid_argument" });
  const connectOptions = {
    contextValues,
    readMaxBytes: deps.bodyLimitBytes,
    shutdownTimeoutMs: deps.shutdownTimeoutMs,
    shutdownError: apiError("SHUTTING_DOWN", {}),
  };
  await app.register(fastifyConnectPlugin, {
    ...connectOptions,
    interceptors: apiInterceptors,
    routes: (router: ConnectRouter) => {
      for (const { service, impl } of services) router.service(service, impl);
      relabelDecodeErrors(router, onRelabel);
    },
  });
  // Health and reflection answer without a token: load balancers and tools.
  await app.register(fastifyConnectPlugin, {
    ...connectOptions,
    interceptors: [observe, errors],
    routes: (router: ConnectRouter) => {
      router.service(Health, new HealthService(deps.readiness, services.map((s) => s.service)));
      router.service(
        ServerReflection,
        new ReflectionService(
          [EntityVersionsService, EntityAccessService, Health, ServerReflection].map((s) => s.typeName),
          [file_entityversions_v1_entity_versions, file_entityversions_v1_entity_access, file_grpc_health_v1_health, file_grpc_reflection_v1_reflection],
        ),
      );
      relabelDecodeErrors(router, onRelabel);
    },
  });
  registerRestGateway(app, {
    services: services.map((s) => s.service),
    call,
    contextValues: (req) => {
      req.rpcOutcome.protocol = "rest";
      return contextValues(req);
    },
    successStatus,
    toError,
  });

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_req, reply) => {
    const report = await deps.readiness.check();
    return reply.code(report.ready ? 200 : 503).send({ status: report.ready ? "ready" : "not ready", checks: report.checks });
  });
  app.get("/metrics", async (_req, reply) => {
    return reply.type(deps.metrics.registry.contentType).send(await deps.metrics.registry.metrics());
  });
  registerOpenApiRoutes(app);
  return app;
}

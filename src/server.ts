import { randomUUID } from "node:crypto";
import type { DescMethod, Message } from "@bufbuild/protobuf";
import type { ConnectError, Interceptor, ServiceImpl } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyServerFactory,
  LogController,
} from "fastify";
import { EntityAccessService } from "../gen/entityversions/v1/entity_access_pb.js";
import { type ConfirmUploadResponse, EntityVersionsService } from "../gen/entityversions/v1/entity_versions_pb.js";
import { type Authenticator, authInterceptor } from "./auth/caller.js";
import { apiError } from "./errors/api-error.js";
import { createOnePortServer, type RequestHandler } from "./net/one-port-server.js";
import { renderRestError } from "./rest/rest-error.js";
import { registerRestGateway, type RestRouteConfig } from "./rest/rest-gateway.js";
import { errorInterceptor, toCatalogError } from "./rpc/error-interceptor.js";
import { createInProcessCaller, type ServiceRegistration } from "./rpc/in-process-caller.js";

/** What the HTTP server is built from. */
export interface ServerDeps {
  readonly versions: ServiceImpl<typeof EntityVersionsService>;
  readonly access: ServiceImpl<typeof EntityAccessService>;
  readonly authenticator: Authenticator;
  /** A pino logger. */
  readonly logger: FastifyBaseLogger;
  /** Largest request body accepted, on every protocol. */
  readonly bodyLimitBytes: number;
  /** How long requests in flight may run once close() begins. */
  readonly shutdownTimeoutMs: number;
}

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

/** HTTP status of a successful REST response: 201 when ConfirmUpload created a version. */
function successStatus(method: DescMethod, response: Message): number {
  if (method === EntityVersionsService.method.confirmUpload) return (response as ConfirmUploadResponse).created ? 201 : 200;
  return 200;
}

/**
 * Builds the HTTP server: one Fastify instance on one port serving gRPC,
 * gRPC-Web and Connect (from the Connect router) and REST JSON (from the
 * google.api.http rules), every protocol through the same interceptors and
 * the same error catalog. The caller listens; tests use port 0 or inject.
 */
export async function buildServer(deps: ServerDeps): Promise<FastifyInstance> {
  // Fastify's types know only its own server kinds; the one-port server is
  // an HTTP/1.1 server to Fastify, with HTTP/2 requests as compatible objects.
  const app: FastifyInstance = Fastify({
    serverFactory: ((handler: RequestHandler) => createOnePortServer(handler)) as unknown as FastifyServerFactory,
    loggerInstance: deps.logger,
    bodyLimit: deps.bodyLimitBytes,
    // One log line per request comes from the onResponse hook below.
    logController: new LogController({ disableRequestLogging: true }),
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
    genReqId: (req) => {
      const sent = req.headers["x-request-id"];
      return typeof sent === "string" && requestIdPattern.test(sent) ? sent : randomUUID();
    },
  });

  const interceptors: Interceptor[] = [errorInterceptor(app.log), authInterceptor(deps.authenticator)];
  const services: ServiceRegistration[] = [
    { service: EntityVersionsService, impl: deps.versions as never },
    { service: EntityAccessService, impl: deps.access as never },
  ];
  const toError = (error: unknown, rpc: string): ConnectError => toCatalogError(error, app.log, rpc);

  // REST takes JSON only; Fastify's default text/plain parser would let a
  // plain-text body through to a confusing "must be a JSON object".
  app.removeContentTypeParser("text/plain");
  app.addHook("onRequest", async (req, reply) => {
    reply.header("x-request-id", req.id);
  });
  app.addHook("onResponse", async (req, reply) => {
    const rpc = (req.routeOptions.config as Partial<RestRouteConfig>).rpc ?? req.routeOptions.url ?? req.url;
    req.log.info(
      { method: req.method, rpc, status: reply.statusCode, durationMs: Math.round(reply.elapsedTime * 100) / 100 },
      "request",
    );
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
            : toError(error, `${req.method} ${req.url}`);
    const rendered = renderRestError(apiErr);
    return reply.code(rendered.status).headers(rendered.headers).send(rendered.body);
  });
  app.setNotFoundHandler((req, reply) => {
    const rendered = renderRestError(apiError("ROUTE_NOT_FOUND", { method: req.method, path: req.url.split("?")[0]! }));
    return reply.code(rendered.status).send(rendered.body);
  });

  await app.register(fastifyConnectPlugin, {
    routes: (router) => {
      for (const { service, impl } of services) router.service(service, impl);
    },
    interceptors,
    readMaxBytes: deps.bodyLimitBytes,
    shutdownTimeoutMs: deps.shutdownTimeoutMs,
    shutdownError: apiError("SHUTTING_DOWN", {}),
  });
  registerRestGateway(app, {
    services: services.map((s) => s.service),
    call: createInProcessCaller(services, interceptors),
    successStatus,
    toError,
  });
  return app;
}

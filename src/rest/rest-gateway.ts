import { create, type DescField, type DescMethod, type DescService, type JsonObject, type JsonValue, type Message, ScalarType } from "@bufbuild/protobuf";
import type { ConnectError, ContextValues } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { http } from "../../gen/google/api/annotations_pb.js";
import { apiError } from "../errors/api-error.js";
import type { InProcessCaller } from "../rpc/in-process-caller.js";
import { lazyAbortSignal } from "../rpc/lazy-abort-signal.js";
import { RequestHeaders } from "../rpc/web-headers.js";
import { queryFieldPath, type RestBinding, restBindings } from "./http-rules.js";
import { readRestJson, writeRestJson } from "./json-codec.js";
import { renderRestError } from "./rest-error.js";

/** Options of the REST gateway. */
export interface RestGatewayOptions {
  readonly services: readonly DescService[];
  /** Runs an RPC through the same interceptors as gRPC and Connect. */
  readonly call: InProcessCaller;
  /** Per-request context values (the log's outcome slot), as the Connect routes get them. */
  readonly contextValues?: (req: FastifyRequest) => ContextValues;
  /** The HTTP status of a successful response; 200 when omitted. */
  readonly successStatus?: (method: DescMethod, response: Message) => number;
  /**
   * Turns an error raised outside the interceptors (a bug in the gateway
   * itself) into a client-facing one without leaking its message.
   */
  readonly toError: (error: unknown, rpc: string) => ConnectError;
}

/** Fastify route config the gateway sets, read by request logging. */
export interface RestRouteConfig {
  readonly rpc: string;
}

function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Sets a (possibly nested) field in request JSON, replacing either spelling of its name. */
function setPath(json: JsonObject, path: readonly DescField[], value: JsonValue): void {
  let target = json;
  path.forEach((field, i) => {
    const current = target[field.name] ?? target[field.jsonName];
    delete target[field.jsonName];
    if (i === path.length - 1) {
      target[field.name] = value;
      return;
    }
    const next: JsonObject = isJsonObject(current) ? current : {};
    target[field.name] = next;
    target = next;
  });
}

function queryValue(field: DescField, values: string[]): JsonValue {
  const one = (v: string): JsonValue => {
    // proto3 JSON takes booleans only as JSON booleans; a query string has text.
    if (field.scalar === ScalarType.BOOL && (v === "true" || v === "false")) return v === "true";
    return v;
  };
  return field.fieldKind === "list" ? values.map(one) : one(values[values.length - 1]!);
}

/** Builds the request JSON from body, query and path, as AIP-127 maps them. */
function requestJson(binding: RestBinding, req: FastifyRequest): JsonObject {
  let json: JsonObject = {};
  if (binding.body === "*") {
    if (req.body !== undefined && req.body !== null) {
      if (!isJsonObject(req.body)) throw apiError("MALFORMED_REQUEST", { problem: "the body must be a JSON object" });
      json = { ...req.body };
    }
  } else if (binding.body !== undefined && req.body !== undefined) {
    json[binding.body.name] = req.body as JsonValue;
  }
  const query = (req.query ?? {}) as Record<string, string | string[]>;
  for (const [key, raw] of Object.entries(query)) {
    const path = binding.body === "*" ? undefined : queryFieldPath(binding, key);
    if (path === undefined) {
      throw apiError("INVALID_ARGUMENT", { field: key, problem: "no such query parameter for this request" });
    }
    setPath(json, path, queryValue(path[path.length - 1]!, Array.isArray(raw) ? raw : [raw]));
  }
  const params = req.params as Record<string, string>;
  for (const variable of binding.variables) setPath(json, variable.fieldPath, params[variable.param] ?? "");
  return json;
}

/**
 * Serves every RPC that has a google.api.http rule as REST JSON, with routes
 * made at start-up from the rules in the service descriptors: adding an
 * annotated RPC adds its route with no other change. Requests run through
 * the in-process caller, so the same interceptors (authentication, error
 * mapping) see REST and gRPC alike; errors are rendered from the same
 * catalog as gRPC's.
 */
export function registerRestGateway(app: FastifyInstance, options: RestGatewayOptions): void {
  for (const binding of restBindings(options.services, http)) {
    const { method } = binding;
    const config: RestRouteConfig = { rpc: `${method.parent.typeName}/${method.name}` };
    const responseSchema = binding.responseBody?.message ?? method.output;
    app.route({
      method: binding.verb,
      url: binding.routePath,
      config,
      handler: async (req: FastifyRequest, reply: FastifyReply) => {
        try {
          const input = readRestJson(method.input, requestJson(binding, req));
          const { message, header } = await options.call(method, input, {
            header: new RequestHeaders(req.headers),
            signal: lazyAbortSignal(reply.raw),
            requestMethod: req.method,
            url: req.url,
            ...(options.contextValues === undefined ? {} : { contextValues: options.contextValues(req) }),
          });
          header?.forEach((value, key) => void reply.header(key, value));
          const payload =
            binding.responseBody === undefined
              ? message
              : ((message as unknown as Record<string, Message | undefined>)[binding.responseBody.localName] ??
                create(responseSchema));
          reply.code(options.successStatus?.(method, message) ?? 200);
          return writeRestJson(responseSchema, payload);
        } catch (error) {
          const rendered = renderRestError(options.toError(error, config.rpc));
          reply.code(rendered.status).headers(rendered.headers);
          return rendered.body;
        }
      },
    });
  }
}

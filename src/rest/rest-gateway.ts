import { Http2ServerRequest } from "node:http2";
import { Readable } from "node:stream";
import { create, type DescField, type DescMethod, type DescService, type JsonObject, type JsonValue, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import FindMyWay from "find-my-way";
import { apiError } from "../errors/api-error.js";
import type { CallPass } from "../http/call-gate.js";
import { hasClosed } from "../http/closed-responses.js";
import { shownPath } from "../http/shown-path.js";
import { notUtf8Json } from "../http/utf8-json.js";
import type { RpcRouteConfig } from "../rpc/connect-routes.js";
import { noteRefusal, type RpcOutcome } from "../rpc/observe-interceptor.js";
import type { InProcessCallInit, InProcessCaller, InProcessStreamCaller } from "../rpc/in-process-caller.js";
import { http } from "../../gen/google/api/annotations_pb.js";
import { type HttpVerb, overlaps, queryFieldPath, type RestBinding, restBindings } from "./http-rules.js";
import { checkJsonText } from "./json-text-check.js";
import { shownName, unknownNameProblem } from "./field-hint.js";
import { readRestJson, writeRestJson } from "./json-codec.js";
import { queryValue } from "./query-value.js";
import { renderRestError } from "./rest-error.js";
import { restTimeoutMs } from "../rpc/timeout-headers.js";

/**
 * Says which of its two refusals Fastify's JSON parser made: text that is
 * not JSON (with JSON.parse's own words on where), or a "__proto__" key (or
 * "constructor" holding "prototype"), refused anywhere in a body,
 * package_json included, as JavaScript would take it for the prototype.
 */
function jsonProblem(text: string, error: Error): Error {
  if ((error as { code?: string }).code !== "FST_ERR_CTP_INVALID_JSON_BODY") return error;
  try {
    JSON.parse(text);
  } catch (syntax: unknown) {
    const where = syntax instanceof SyntaxError ? ` (${syntax.message})` : "";
    return apiError("MALFORMED_REQUEST", { problem: `the body is not valid JSON${where}: send one JSON object of the request's fields (listed at /docs)` });
  }
  return apiError("MALFORMED_REQUEST", {
    problem: 'the body has a "__proto__" key (or "constructor" with "prototype"), which no part of a request may have: rename or remove it',
  });
}

/** Options of the REST gateway. */
export interface RestGatewayOptions {
  readonly services: readonly DescService[];
  /** Runs an RPC through the same interceptors as gRPC and Connect. */
  readonly call: InProcessCaller;
  /** Runs a server-streaming RPC through the same interceptors; its messages are written as newline-delimited JSON. */
  readonly callStream: InProcessStreamCaller;
  /** Per-request context values (the log's outcome slot, the auth result), as the Connect routes get them. */
  readonly contextValues: (req: FastifyRequest) => ContextValues;
  /** The request's log outcome, where a call refused before any interceptor ran is noted. */
  readonly outcome: (req: FastifyRequest) => RpcOutcome;
  /**
   * Whether the call is already refused from its headers (authentication):
   * it is then answered before its body is read, through the interceptors.
   */
  readonly refused: (req: FastifyRequest) => boolean;
  /** The unary call's place at the server's call gate, when it holds one. */
  readonly callPass?: (req: FastifyRequest) => CallPass | undefined;
  /** Aborts calls still running when the server stops waiting for them. */
  readonly shutdownSignal?: AbortSignal;
  /**
   * Whether a body arrives that no parser read (a GET's, or an HTTP/2
   * DELETE's with no Content-Length): true at its first byte, false at its
   * end, read against the same time and memory bounds as every body. Asked
   * only of rules that take no body, when the headers leave one possible;
   * without it, such a request is judged from its headers alone.
   */
  readonly bodyArrives?: (req: FastifyRequest, reply: FastifyReply) => Promise<boolean>;
  /** The HTTP status of a successful response; 200 when omitted. */
  readonly successStatus?: (method: DescMethod, response: Message) => number;
  /**
   * Turns an error raised outside the interceptors (a bug in the gateway
   * itself) into a client-facing one without leaking its message.
   */
  /** Any error as a catalog error, an unexpected one logged with the request's logger (its reqId). */
  readonly toError: (error: unknown, rpc: string, req: FastifyRequest) => ConnectError;
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

/** The values a JSON body gives a (possibly nested) field, under either spelling of each name. */
function bodyValues(json: JsonObject, path: readonly DescField[]): JsonValue[] {
  let level: JsonObject[] = [json];
  path.forEach((field, i) => {
    const found = level.flatMap((o) => [o[field.name], field.jsonName === field.name ? undefined : o[field.jsonName]]).filter((v) => v !== undefined);
    level = i === path.length - 1 ? (found as JsonObject[]) : found.filter(isJsonObject);
  });
  return level as JsonValue[];
}

const pathFieldsOf = new WeakMap<RestBinding, ReadonlySet<DescField>>();

/** The fields a binding's path variables set: not the caller's to send elsewhere. Memoised: every request asks. */
function pathFields(binding: RestBinding): ReadonlySet<DescField> {
  let fields = pathFieldsOf.get(binding);
  if (fields === undefined) {
    fields = new Set(binding.variables.map((v) => v.fieldPath[0]!));
    pathFieldsOf.set(binding, fields);
  }
  return fields;
}

/** The top-level query parameters a binding takes, to name when one sent is not among them. */
function queryParameters(binding: RestBinding): string[] {
  const bound = pathFields(binding);
  return binding.method.input.fields
    .filter((f) => !bound.has(f) && f !== binding.body && queryFieldPath(binding, f.name) !== undefined)
    .map((f) => f.name);
}

/** The fields a binding's JSON body may carry, to name when one sent is not among them. */
function bodyFields(binding: RestBinding): string[] {
  const bound = pathFields(binding);
  return binding.method.input.fields.filter((f) => !bound.has(f)).map((f) => f.name);
}

/** Requests whose body a parser here read (or found absent): an undefined body is then no body. */
const bodyRead = new WeakSet<FastifyRequest>();

/**
 * Whether a body may follow the request's headers: HTTP/2 unless they
 * ended the stream or said Content-Length: 0; HTTP/1.1 when they announce
 * one (sendsBody).
 */
function mayCarryBody(req: FastifyRequest): boolean {
  if (req.raw instanceof Http2ServerRequest) return !req.raw.stream.endAfterHeaders && req.headers["content-length"] !== "0";
  return sendsBody(req);
}

/**
 * Whether a body may follow the headers without their saying how long it
 * is: HTTP/2 with no Content-Length, or a chunked HTTP/1.1 body, which
 * may yet be empty. Only its arrival tells.
 */
function unannouncedBody(req: FastifyRequest): boolean {
  return mayCarryBody(req) && req.headers["content-length"] === undefined;
}

/** Whether the request's headers announce a body (RFC 9112 6.3). */
function sendsBody(req: FastifyRequest): boolean {
  const length = req.headers["content-length"];
  return req.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

/** Builds the request JSON from body, query and path, as AIP-127 maps them; `bodyCame` is what a probe of an unread body found. */
function requestJson(binding: RestBinding, req: FastifyRequest, bodyCame?: boolean): JsonObject {
  let json: JsonObject = {};
  const params = req.params as Record<string, string>;
  if (binding.body === "*") {
    // No body is undefined (Fastify's, and the parsers' for an empty one);
    // a null came as the JSON text `null`, a body that is not an object.
    if (req.body !== undefined) {
      if (!isJsonObject(req.body)) throw apiError("MALFORMED_REQUEST", { problem: "the body must be a JSON object: send one JSON object of the request's fields (listed at /docs)" });
      json = { ...req.body };
      // A field the path sets may be repeated in the body, but not
      // contradicted, under either spelling of its name: setPath keeps only
      // the path's value, so a contradiction would be dropped unseen.
      for (const variable of binding.variables) {
        const value = params[variable.param] ?? "";
        // proto3 JSON reads null, and a field without presence at its
        // default (protojson's EmitUnpopulated writes ""), as not set: no
        // contradiction, and the path's value replaces it.
        const leaf = variable.fieldPath[variable.fieldPath.length - 1]!;
        const unset = (sent: JsonValue) => sent === null || (sent === "" && leaf.presence === FeatureSet_FieldPresence.IMPLICIT);
        for (const sent of bodyValues(json, variable.fieldPath)) {
          if (sent !== value && !unset(sent)) {
            throw apiError("INVALID_ARGUMENT", {
              field: variable.fieldPath.map((f) => f.name).join("."),
              problem: `is set by the path (${JSON.stringify(value)}); leave it out of the body`,
            });
          }
        }
      }
    }
  } else if (binding.body !== undefined && req.body !== undefined) {
    json[binding.body.name] = req.body as JsonValue;
  } else if (binding.body === undefined) {
    // http.proto: a rule without `body` has no request body; what was sent
    // would be ignored. A body Fastify did not read (a GET's, a DELETE's
    // without Content-Type) is refused when it came, or else from its headers.
    const parsed = req.body !== undefined && !(isJsonObject(req.body) && Object.keys(req.body).length === 0);
    if (parsed || (req.body === undefined && !bodyRead.has(req) && (bodyCame ?? sendsBody(req)))) {
      const query = queryParameters(binding);
      throw apiError("MALFORMED_REQUEST", {
        problem: `${req.method} ${shownPath(req.url)} takes no body${parsed ? " (at most {})" : ""}: its fields go in the path${query.length > 0 ? ` and the query (${query.join(", ")})` : ""}`,
      });
    }
  }
  const query = (req.query ?? {}) as Record<string, string | string[]>;
  const given = new Set<DescField>();
  for (const [key, raw] of Object.entries(query)) {
    const path = binding.body === "*" ? undefined : queryFieldPath(binding, key);
    if (path === undefined) {
      throw apiError("INVALID_ARGUMENT", {
        field: shownName(key),
        problem:
          binding.body === "*"
            ? "this request takes no query parameters: send its fields in the JSON body"
            : unknownNameProblem("query parameter", key, queryParameters(binding)),
      });
    }
    // A nested variable ({shelf.name}) sets that field alone: shelf's other fields stay the query's.
    if (binding.variables.some((v) => overlaps(v.fieldPath, path))) throw apiError("INVALID_ARGUMENT", { field: key, problem: "is set by the path; leave it out of the query" });
    // As grpc-gateway filters it: the body's field is the body's alone.
    if (binding.body !== undefined && path[0] === binding.body) {
      throw apiError("INVALID_ARGUMENT", { field: key, problem: `is part of the body (${binding.body.name}); give it there, not in the query` });
    }
    const last = path[path.length - 1]!;
    // Both spellings of one field (page_size and pageSize) are one parameter given twice.
    if (given.has(last) && last.fieldKind !== "list") throw apiError("INVALID_ARGUMENT", { field: last.name, problem: "is given more than once (as name and as jsonName); give it once" });
    given.add(last);
    setPath(json, path, queryValue(key, last, Array.isArray(raw) ? raw : [raw]));
  }
  for (const variable of binding.variables) {
    const value = params[variable.param] ?? "";
    // A trailing or doubled slash ("…/versions/"), not a field left out.
    if (value === "") throw apiError("INVALID_ARGUMENT", { field: variable.fieldPath.map((f) => f.name).join("."), problem: 'is empty in the path: name one after its "/", or leave that "/" out' });
    setPath(json, variable.fieldPath, value);
  }
  return json;
}

/** Node's request headers as fetch Headers, the form interceptors and handlers read. */
function webHeaders(req: FastifyRequest): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(req.headers)) {
    // HTTP/2 pseudo-headers (":path") are not header names.
    if (key.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(key, v);
  }
  return headers;
}

/**
 * A signal that aborts when the client goes away before its answer is
 * written. Asked as "was the answer ended", not "was it flushed": an
 * HTTP/2 response whose stream the client reset reads as finished.
 */
function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableEnded) controller.abort();
  };
  if (hasClosed(reply.raw)) onClose();
  else reply.raw.once("close", onClose);
  return controller.signal;
}

/** A signal that aborts when the response closes, answered or not. */
function responseClosed(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  if (hasClosed(reply.raw)) controller.abort();
  else reply.raw.once("close", () => controller.abort());
  return controller.signal;
}

/**
 * Whether a GET rule also answers HEAD. Not a server stream: its headers
 * come only with its first message, and a HEAD would hold a watch open for
 * an answer nobody reads.
 */
function headRoute(binding: RestBinding): boolean {
  return binding.verb === "GET" && binding.method.methodKind !== "server_streaming";
}

/** What the REST routes tell the rest of the server. */
export interface RestRoutes {
  /**
   * The HTTP methods a REST path takes (none when no REST route has the
   * path): a request with another method is answered 405 with them.
   */
  allowedMethods(path: string): readonly string[];
}

const httpMethods = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"] as const;

/** The media type of a server stream's answer: one JSON object per line. */
const ndjson = "application/x-ndjson";

/**
 * Serves every RPC that has a google.api.http rule as REST JSON, with routes
 * made at start-up from the rules in the service descriptors: adding an
 * annotated RPC adds its route with no other change. Requests run through
 * the in-process caller, so the same interceptors (authentication,
 * deadlines, error mapping, metrics) see REST and gRPC alike; errors are
 * rendered from the same catalog as gRPC's. A call refused from its headers
 * is answered before Fastify reads its body.
 *
 * A server-streaming RPC answers in grpc-gateway's line framing (its
 * content type ours: grpc-gateway sends application/json): newline-
 * delimited JSON (`application/x-ndjson`), one `{"result": …}` line per
 * message, each written as it comes. An error before the first message is
 * an ordinary error answer (its status and body); one after the stream
 * began is a last line `{"error": …}` holding the same body as every REST
 * error (where grpc-gateway puts a google.rpc.Status): a REST client reads
 * one error shape.
 */
/** Decodes a body as UTF-8, throwing on bytes that are not (a lenient decoder would put U+FFFD in their place). */
const utf8 = new TextDecoder("utf-8", { fatal: true });
/** JSON's whitespace (RFC 8259, 2): a body of nothing else is no body. */
const isJsonWhitespace = (byte: number) => byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
/** Charsets whose bytes are UTF-8's: its names, and ASCII, a subset. */
const utf8Charsets = new Set(["utf-8", "utf8", "us-ascii"]);

export function registerRestGateway(app: FastifyInstance, options: RestGatewayOptions): RestRoutes {
  // Fastify's own JSON parser (with its prototype-poisoning checks), then
  // a refusal of any key given twice in one object.
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, bytes, done) => {
    // A body sent where no route serves (answered 404 or 405, no token
    // needed) is read within the budget and deadline, but never parsed:
    // JSON.parse of a MiB costs a tenth of a second of the event loop.
    if (req.is404) return done(null, undefined);
    bodyRead.add(req);
    // JSON between systems is UTF-8 (RFC 8259, 8.1). Another charset, or
    // bytes that are not UTF-8, would be decoded with U+FFFD in place of
    // what was sent, and stored so: refused, as the RPC protocols' JSON is.
    // No body is no body, whatever Content-Type says (clients that set it
    // on every request, a PUT with Content-Length: 0): grpc-gateway reads
    // it as the empty message, and a rule without a body never reads one.
    // (A UTF-8 byte order mark before it counts as nothing too, as TextDecoder reads it.)
    const raw = bytes as Buffer;
    const bom = raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf ? 3 : 0;
    if (raw.subarray(bom).every(isJsonWhitespace)) return done(null, undefined);
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers["content-type"] ?? "")?.[1]?.toLowerCase();
    if (charset !== undefined && !utf8Charsets.has(charset)) {
      return done(apiError("UNSUPPORTED_MEDIA_TYPE", { contentType: req.headers["content-type"] ?? "" }), undefined);
    }
    let text: string;
    try {
      text = utf8.decode(bytes as Buffer);
    } catch {
      return done(notUtf8Json("the body"), undefined);
    }
    parseJson(req, text, (error, body) => {
      if (error !== null) return done(jsonProblem(text, error), undefined);
      const problem = checkJsonText(text);
      if (problem === undefined) return done(null, body);
      done(
        apiError("MALFORMED_REQUEST", {
          problem:
            "duplicateKey" in problem
              ? `the key ${JSON.stringify(shownName(problem.duplicateKey))} appears twice in one JSON object: give each field once`
              : `the number ${shownName(problem.roundedInteger)} is an integer beyond 2^53, which a JSON number holds only rounded (it would be read as ${Number(problem.roundedInteger)}): send it as a string, "${shownName(problem.roundedInteger)}"`,
        }),
        undefined,
      );
    });
  });
  // REST takes JSON only: Fastify's default text/plain parser would let a
  // plain-text body through to a confusing "must be a JSON object". Any
  // other type is refused 415, except with no body at all: again no body
  // is no body (a DELETE whose client labels even nothing text/plain).
  // Whether one comes is known only by waiting for its first byte or its
  // end: HTTP/2 needs no Content-Length, and a chunked body may be empty.
  app.removeContentTypeParser("text/plain");
  app.addContentTypeParser("*", (req, payload, done) => {
    // An unrouted request (a gRPC call of an unknown method) is answered by the not-found handler unread, as Fastify does without this parser.
    if (req.is404) return done(null, undefined);
    bodyRead.add(req);
    if (!mayCarryBody(req)) return done(null, undefined);
    const unsupported = () => apiError("UNSUPPORTED_MEDIA_TYPE", { contentType: req.headers["content-type"] ?? "(none)" });
    // A length says a body comes: refused at once, unread.
    if (req.headers["content-length"] !== undefined) return done(unsupported(), undefined);
    let settled = false;
    const settle = (body: boolean) => {
      if (settled) return;
      settled = true;
      payload.off("data", onData).off("end", onEnd).off("error", onError);
      // The rest is left unread: the answer closes the connection or the stream.
      payload.pause();
      done(body ? unsupported() : null, undefined);
    };
    const onData = (chunk: Uint8Array) => chunk.byteLength > 0 && settle(true);
    const onEnd = () => settle(false);
    const onError = (error: Error) => {
      if (settled) return;
      settled = true;
      done(error, undefined);
    };
    payload.on("data", onData).once("end", onEnd).once("error", onError);
  });
  // The same router Fastify uses, holding only the REST routes: which
  // methods a path takes is then answered exactly as routing would.
  const routes = FindMyWay({ maxParamLength: 512 });
  const bindings = restBindings(options.services, http);
  for (const binding of bindings) {
    routes.on(binding.verb, binding.routePath, () => undefined);
    if (headRoute(binding)) routes.on("HEAD", binding.routePath, () => undefined);
  }
  for (const binding of bindings) {
    const { method } = binding;
    const config: RpcRouteConfig = { rpc: `${method.parent.typeName}/${method.name}`, authenticate: true, gateway: "rest", unary: method.methodKind === "unary" };
    const responseSchema = binding.responseBody?.message ?? method.output;
    const fieldNames = binding.body === "*" ? bodyFields(binding) : queryParameters(binding);
    const callInit = (req: FastifyRequest, reply: FastifyReply): InProcessCallInit => {
      const header = webHeaders(req);
      const requested = restTimeoutMs(header);
      // Its deadline counts from its arrival, as it would behind grpc-gateway: the
      // wait for a place and the body's reading are spent out of it.
      const timeoutMs = requested === undefined ? undefined : Math.max(0, requested - reply.elapsedTime);
      return {
        protocolName: "rest",
        header,
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
        // A stream can send nothing once its response has closed, however it
        // closed; a unary call's answer may be written whole by then.
        signal: method.methodKind === "server_streaming" ? responseClosed(reply) : clientGone(reply),
        ...(options.shutdownSignal === undefined ? {} : { shutdownSignal: options.shutdownSignal }),
        requestMethod: req.method,
        url: req.url,
        contextValues: options.contextValues(req),
      };
    };
    const payloadOf = (message: Message): Message =>
      binding.responseBody === undefined
        ? message
        : ((message as unknown as Record<string, Message | undefined>)[binding.responseBody.localName] ?? create(responseSchema));
    /** The REST error answer of a failed call: its status, headers and body. */
    const failed = (req: FastifyRequest, error: unknown) => {
      const connectError = options.toError(error, config.rpc, req);
      // Refused before the interceptors ran, maybe (a body that does not map to the message).
      noteRefusal(options.outcome(req), connectError);
      return renderRestError(connectError);
    };
    /** The answer to a client that has left: canceled, as its log line already says; written nowhere. */
    const wentAway = (req: FastifyRequest, reply: FastifyReply) => {
      const rendered = failed(req, new ConnectError("the client went away", Code.Canceled));
      return reply.code(rendered.status).headers(rendered.headers).send(rendered.body);
    };
    const answerStream = async (req: FastifyRequest, reply: FastifyReply, input: () => Message) => {
      // Its client left before the call began (while its token was
      // checked): a watch opened now would wait for a reader that is gone.
      if (hasClosed(reply.raw)) return wentAway(req, reply);
      let messages: AsyncIterator<Message>;
      let first: IteratorResult<Message>;
      try {
        const stream = await options.callStream(method, input(), callInit(req, reply));
        messages = stream.messages[Symbol.asyncIterator]();
        // The status is known only once the first message (or error) is.
        first = await messages.next();
        stream.header.forEach((value, key) => void reply.header(key, value));
      } catch (error) {
        const rendered = failed(req, error);
        return reply.code(rendered.status).headers(rendered.headers).send(rendered.body);
      }
      if (hasClosed(reply.raw)) {
        // Left as its first message came. A closed HTTP/2 response never
        // reads (or destroys) the body it is sent, so lines() would never
        // run to end the call: it is ended here.
        await messages.return?.();
        return wentAway(req, reply);
      }
      const line = (json: JsonValue) => `${JSON.stringify(json)}\n`;
      const lines = async function* () {
        try {
          for (let next = first; next.done !== true; next = await messages.next()) yield line({ result: writeRestJson(responseSchema, payloadOf(next.value)) });
        } catch (error) {
          yield line({ error: renderRestError(options.toError(error, config.rpc, req)).body });
        } finally {
          await messages.return?.();
        }
      };
      return reply.code(200).type(ndjson).send(Readable.from(lines(), { objectMode: false }));
    };
    const answer = async (req: FastifyRequest, reply: FastifyReply, input: () => Message) => {
      if (method.methodKind === "server_streaming") return answerStream(req, reply, input);
      const pass = options.callPass?.(req);
      if (pass !== undefined && !pass.begin()) {
        // The client went away before the call began: nothing to run.
        const rendered = failed(req, new ConnectError("the client went away", Code.Canceled));
        reply.code(rendered.status);
        return rendered.body;
      }
      try {
        const { message, header } = await options.call(method, input(), callInit(req, reply));
        header.forEach((value, key) => void reply.header(key, value));
        reply.code(options.successStatus?.(method, message) ?? 200);
        return writeRestJson(responseSchema, payloadOf(message));
      } catch (error) {
        const rendered = failed(req, error);
        reply.code(rendered.status).headers(rendered.headers);
        return rendered.body;
      } finally {
        pass?.end();
      }
    };
    app.route({
      method: binding.verb,
      url: binding.routePath,
      exposeHeadRoute: headRoute(binding),
      config,
      // Refused from the headers: answered now, through the interceptors,
      // with an empty message that is never looked at; the body is not read.
      onRequest: async (req, reply) => {
        if (!options.refused(req)) return;
        const body = await answer(req, reply, () => create(method.input));
        // A stream's refusal has been sent already.
        return reply.sent ? reply : reply.send(body);
      },
      handler: async (req, reply) => {
        // A body no parser read is waited for, first byte or end, only
        // where the headers leave it open and do not announce its length.
        let bodyCame: boolean | undefined;
        let probeFailed: unknown;
        if (binding.body === undefined && options.bodyArrives !== undefined && req.body === undefined && !bodyRead.has(req) && unannouncedBody(req)) {
          try {
            bodyCame = await options.bodyArrives(req, reply);
          } catch (error) {
            probeFailed = error;
          }
        }
        return answer(req, reply, () => {
          if (probeFailed !== undefined) throw probeFailed;
          return readRestJson(method.input, requestJson(binding, req, bodyCame), fieldNames);
        });
      },
    });
  }
  // A path of literal segments is its own resource, even where another
  // method's route takes a variable there: GET …/versions/upload-url is
  // upload-url with the wrong method (405, Allow: POST), not GetVersion of
  // a version named "upload-url". Fastify prefers a literal segment to a
  // variable of the same method only, so those methods get a route on the
  // literal path that answers as an unrouted request is answered.
  for (const [url, verbs] of shadowedMethods(bindings)) {
    for (const verb of verbs) app.route({ method: verb, url, exposeHeadRoute: verb === "GET", handler: (_req, reply) => reply.callNotFound() });
  }
  return {
    allowedMethods: (path) => {
      // Only the most literal routes a path matches are its resource's.
      const matched = httpMethods.flatMap((m) => {
        const found = routes.find(m, path);
        return found === null ? [] : [{ m, variables: Object.keys(found.params).length }];
      });
      const fewest = Math.min(...matched.map((f) => f.variables));
      return matched.filter((f) => f.variables === fewest).map((f) => f.m);
    },
  };
}

/**
 * For each binding's route path, the methods of other routes that have a
 * variable where it has a literal segment, and so would take its requests
 * of those methods, less the methods it serves itself.
 */
function shadowedMethods(bindings: readonly RestBinding[]): Map<string, Set<HttpVerb>> {
  // A variable before a custom verb (":p0(^.+)::undelete") is a variable too,
  // but takes only a segment that ends with that verb.
  const isVariable = (segment: string) => segment.startsWith(":");
  const takesSegment = (variable: string, literal: string) => {
    const verb = /^:[^(:]+(?:\([^)]*\))?::(.+)$/.exec(variable)?.[1];
    return verb === undefined || (literal.endsWith(`::${verb}`) && literal.length > verb.length + 2);
  };
  const served = new Set(bindings.map((b) => `${b.verb} ${b.routePath}`));
  const shadowed = new Map<string, Set<HttpVerb>>();
  for (const literal of bindings) {
    const ls = literal.routePath.split("/");
    for (const other of bindings) {
      const os = other.routePath.split("/");
      if (other.verb === literal.verb || os.length !== ls.length || served.has(`${other.verb} ${literal.routePath}`)) continue;
      const fits = ls.every((l, i) => l === os[i] || (isVariable(os[i]!) && takesSegment(os[i]!, l)));
      const takes = ls.some((l, i) => !isVariable(l) && isVariable(os[i]!));
      if (!fits || !takes) continue;
      const verbs = shadowed.get(literal.routePath) ?? new Set<HttpVerb>();
      shadowed.set(literal.routePath, verbs.add(other.verb));
    }
  }
  return shadowed;
}

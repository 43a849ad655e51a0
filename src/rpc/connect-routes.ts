import http2 from "node:http2";
import { type ConnectRouter, type ConnectRouterOptions, type ContextValues, ConnectError, createConnectRouter } from "@connectrpc/connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from "fastify";
import type { RpcInflationScope } from "../config.js";
import { apiError } from "../errors/api-error.js";
import type { CallPass } from "../http/call-gate.js";
import { type BodyGuard, guardedBody } from "../http/guarded-body.js";
import { chargedCompressions, chargingAnswerTo, chargingInflationTo, type InflationCharge } from "./charged-inflation.js";
import { getMessageRefusal, withEmptyGetMessage } from "./connect-get-message.js";
import { lowercaseEncodingNames, mayBeCompressed } from "./encoding-names.js";
import { watchingGrpcWebStatus } from "./grpc-web-status.js";
import { decodedTextBody, encodedTextBody, grpcWebBinaryContentType, grpcWebTextContentType, isGrpcWebText } from "./grpc-web-text.js";
import type { ErrorLogger } from "./error-interceptor.js";
import { minimalGrpcMessage } from "./grpc-message.js";
import { codeName, noteRefusal, type RpcOutcome } from "./observe-interceptor.js";
import { dropUntimeableDeadlines, spendDeadline } from "./timeout-headers.js";
import { grpcErrorHeaders, sendTrailersOnly } from "./trailers-only.js";
import { connectErrorJson } from "./unknown-method.js";
import { jsonFraming, notUtf8Message, utf8JsonMessages } from "./utf8-messages.js";

type UniversalHandler = ConnectRouter["handlers"][number];
type UniversalResponse = Awaited<ReturnType<UniversalHandler>>;

/** Fastify route config of an RPC route, read by the server's hooks. */
export interface RpcRouteConfig {
  /** "package.Service/Method". */
  readonly rpc: string;
  /** Authenticate from the headers before the body is read (the API services). */
  readonly authenticate: boolean;
  /** Which gateway serves it: "connect" (gRPC, gRPC-Web, Connect) or "rest". */
  readonly gateway: "connect" | "rest";
  /** A unary RPC: its calls hold a place at the server's call gate (streams have caps of their own). */
  readonly unary: boolean;
}

/** Options of the Connect routes plugin. */
export interface ConnectRoutesOptions extends ConnectRouterOptions {
  /** Registers the services on the router. */
  readonly routes: (router: ConnectRouter) => void;
  /** Whether the routes' calls are authenticated from their headers before their bodies are read (the API services). */
  readonly authenticate: boolean;
  /** The unary call's place at the server's call gate, when it holds one. */
  readonly callPass?: (req: FastifyRequest) => CallPass | undefined;
  /** Told when a unary call's answer is ready to be written, so that one its client never takes can be dropped. */
  readonly answerReady?: (req: FastifyRequest, reply: FastifyReply) => void;
  /** Per-request context values (the log's outcome slot, the auth result). */
  readonly contextValues: (req: FastifyRequest) => ContextValues;
  /** The request's log outcome, where a call refused before any interceptor ran is noted. */
  readonly outcome: (req: FastifyRequest) => RpcOutcome;
  /**
   * Whether the call is already refused from its headers (authentication):
   * its body is then never read, and the interceptors answer the refusal.
   */
  readonly refused: (req: FastifyRequest) => boolean;
  /** Told (once) of a compressed message that came to be inflated with no body budget to charge, a bug: it is refused. */
  readonly log: ErrorLogger;
  /** Which calls run in the scope that charges what their messages inflate to (RPC_INFLATION_SCOPE). */
  readonly inflationScope: RpcInflationScope;
  /** What each request body is read against. */
  readonly bodyGuard: (req: FastifyRequest, reply: FastifyReply) => BodyGuard;
  /**
   * Refuses the call from its headers, as authentication does: `refused`
   * then holds, and the interceptors answer the error. Taken for a Connect
   * GET, whose message comes in its URL rather than a body that could fail.
   */
  readonly refuse: (req: FastifyRequest, error: ConnectError) => void;
  /**
   * Filled with the HTTP methods each RPC path takes (POST; GET too for a
   * Connect GET), so that a path called with another is answered 405 with
   * `Allow`, as the REST paths are.
   */
  readonly methodsByPath?: Map<string, readonly string[]>;
}

const encoder = new TextEncoder();

/**
 * The body of an empty request message in the request's own format: one
 * uncompressed envelope for the enveloped protocols (gRPC, gRPC-Web,
 * Connect streaming), the bare message for Connect unary; `{}` in JSON.
 */
function emptyMessageBody(contentType: string): Uint8Array {
  // Media types are case-insensitive (RFC 9110, 8.3.1), and Connect reads them so.
  const payload = /^application\/(?:grpc(?:-web)?\+json|connect\+json|json)\b/i.test(contentType) ? encoder.encode("{}") : new Uint8Array(0);
  if (!/^application\/(?:grpc|connect\+)/i.test(contentType)) return payload;
  const envelope = new Uint8Array(5 + payload.byteLength);
  new DataView(envelope.buffer).setUint32(1, payload.byteLength);
  envelope.set(payload, 5);
  return envelope;
}

/**
 * The protocol of a Connect router request, by its content type: also for
 * a call that ended before its route's handler ran (its client gone while
 * its token was checked), which is counted under it all the same.
 */
export function protocolOf(contentType: string | undefined): string {
  const type = contentType?.toLowerCase();
  if (type?.startsWith("application/grpc-web") === true) return "grpc-web";
  if (type?.startsWith("application/grpc") === true) return "grpc";
  return "connect";
}

async function* once(chunk: Uint8Array): AsyncGenerator<Uint8Array> {
  yield chunk;
}

/** The gRPC status of a refusal, in the protocol's own place: a trailer, a header, else the HTTP status (Connect). */
function refusalCode(res: UniversalResponse): string {
  const grpcStatus = res.trailer?.get("grpc-status") ?? res.header?.get("grpc-status");
  if (grpcStatus !== null && grpcStatus !== undefined && /^\d+$/.test(grpcStatus)) return codeName(Number(grpcStatus));
  // The Connect protocol's error statuses (connectrpc.com/docs/protocol, "Error codes").
  const byStatus: Record<number, string> = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    405: "unimplemented",
    408: "deadline_exceeded",
    409: "aborted",
    413: "resource_exhausted",
    415: "unimplemented",
    429: "resource_exhausted",
    499: "canceled",
    500: "internal",
    501: "unimplemented",
    503: "unavailable",
    504: "deadline_exceeded",
  };
  return byStatus[res.status] ?? "unknown";
}

async function* prepend(first: Uint8Array, rest: AsyncIterator<Uint8Array>, trailer: Headers): AsyncGenerator<Uint8Array> {
  yield first;
  for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
  // Connect has set the status by now; the trailers are written after this.
  readableGrpcMessage(trailer);
}

/** Re-encodes the status message of a gRPC answer so that every client decodes it whole (see minimalGrpcMessage). */
function readableGrpcMessage(headers: Headers): void {
  const message = headers.get("grpc-message");
  if (message !== null) headers.set("grpc-message", minimalGrpcMessage(message));
}

/**
 * Whether a gRPC answer carries no message: it is then sent as
 * Trailers-Only (PROTOCOL-HTTP2.md), the status in the one HEADERS frame
 * that ends the stream, as gRPC servers answer an immediate error, rather
 * than empty headers then trailers. The answer's body is primed either way,
 * and its status message re-encoded for every client (minimalGrpcMessage).
 */
async function messageless(res: UniversalResponse): Promise<{ res: UniversalResponse; empty: boolean }> {
  if (res.trailer === undefined || res.body === undefined) return { res, empty: false };
  const it = res.body[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done !== true) return { res: { ...res, body: prepend(first.value, it, res.trailer) }, empty: false };
  readableGrpcMessage(res.trailer);
  return { res, empty: true };
}

/**
 * Serves a Connect router's handlers (gRPC, gRPC-Web and Connect, unary and
 * streaming) on Fastify, through connect-node's public adapters, as
 * @connectrpc/connect-fastify's plugin does, plus what that plugin cannot
 * offer: a call refused from its headers (authentication) is answered
 * without reading its body; every body is read against the connection's
 * byte budget and a deadline; and a call Connect refuses before any
 * interceptor ran (a message that does not decode, an unsupported
 * encoding) is still noted for the request's metrics and log line.
 */
export const connectRoutes: FastifyPluginCallback<ConnectRoutesOptions> = (instance, opts, done) => {
  const router = createConnectRouter({ ...opts, acceptCompression: chargedCompressions(opts.log) });
  opts.routes(router);
  // Connect reads its bodies itself: no Fastify parser may consume them
  // (this plugin's scope only, so REST keeps its JSON parser).
  instance.removeAllContentTypeParsers();
  instance.addContentTypeParser("*", (_req, _payload, parsed) => parsed(null, undefined));
  for (const handler of router.handlers) {
    const config: RpcRouteConfig = {
      rpc: `${handler.service.typeName}/${handler.method.name}`,
      authenticate: opts.authenticate,
      gateway: "connect",
      unary: handler.method.methodKind === "unary",
    };
    /** Answers the call through Connect's handler for its protocol. */
    const serve = async (req: FastifyRequest, reply: FastifyReply, outcome: RpcOutcome): Promise<void> => {
      const closed = new Promise<void>((resolve) => reply.raw.once("close", () => resolve()));
      const unreadable = req.method === "GET" && !opts.refused(req) ? getMessageRefusal(req.url) : undefined;
      if (unreadable !== undefined) opts.refuse(req, unreadable);
      const guard = opts.refused(req) ? undefined : opts.bodyGuard(req, reply);
      // A JSON message must be UTF-8 (utf8-messages): looked at as the body
      // is read, or above for a Connect GET, or once inflated when compressed.
      const framing = jsonFraming(req.headers["content-type"] ?? null);
      const json = framing !== undefined || (req.method === "GET" && new URL(req.url, "http://x").searchParams.get("encoding") === "json");
      const uReq = universalRequestFromNodeRequest(req.raw, reply.raw, undefined, opts.contextValues(req));
      lowercaseEncodingNames(uReq.header);
      // gRPC-Web's text form, which Connect does not implement: given to it
      // as the binary form, its bodies translated (grpc-web-text).
      const text = req.method === "POST" && isGrpcWebText(uReq.header.get("content-type"));
      if (text) uReq.header.set("content-type", grpcWebBinaryContentType);
      // What a compressed message inflates to counts against the same
      // budget, as it is inflated (charged-inflation). Only a call whose
      // request names a coding is run in that scope: on Node 20 the first
      // AsyncLocalStorage.run turns on promise hooks for the whole process,
      // for good, and every call after pays for them (docs/performance.md).
      // A message that comes compressed all the same is refused, never
      // inflated uncounted.
      const scoped = opts.inflationScope === "all" || mayBeCompressed(req.method, uReq.header, req.url);
      const inflation: InflationCharge | undefined = guard === undefined || !scoped ? undefined : { ticket: guard.ticket, ...(json ? { check: notUtf8Message } : {}) };
      dropUntimeableDeadlines(uReq.header);
      spendDeadline(uReq.header, reply.elapsedTime);
      let bodyError: unknown;
      if (opts.refused(req)) {
        // The interceptors answer the refusal; the message they are
        // given is empty, and neither its body nor a GET's message is read.
        uReq.header.delete("content-encoding");
        uReq.header.delete("content-length");
        uReq.body = once(emptyMessageBody(uReq.header.get("content-type") ?? ""));
        if (req.method === "GET") uReq.url = withEmptyGetMessage(uReq.url);
      } else if (guard !== undefined && Symbol.asyncIterator in Object(uReq.body)) {
        // A text body is charged what it decodes to, the bytes held: its
        // base64 is a third larger, and charged that, a message of up to
        // MAX_REQUEST_BYTES could pass its connection's budget alone.
        const raw = uReq.body as AsyncIterable<Uint8Array>;
        let guarded = guardedBody(text ? decodedTextBody(raw) : raw, guard);
        const encoding = uReq.header.get("content-encoding");
        if (framing === "enveloped" || (framing === "bare" && (encoding === null || encoding === "identity"))) guarded = utf8JsonMessages(guarded, framing);
        uReq.body = (async function* () {
          try {
            yield* guarded;
          } catch (error) {
            bodyError = error;
            throw error;
          }
        })();
      }
      let answered: UniversalResponse;
      try {
        answered = await chargingInflationTo(inflation, () => handler(uReq));
        if (answered.body !== undefined) answered = { ...answered, body: chargingAnswerTo(inflation, answered.body) };
      } catch (error) {
        if (!(error instanceof URIError) || outcome.protocol === "connect") throw error;
        // Connect could not write its own status into grpc-message: the
        // request's JSON held a lone surrogate (an unpaired "\ud83d"),
        // quoted in Connect's decoding error, which no UTF-8 can carry.
        const refusal = apiError("MALFORMED_REQUEST", { problem: "its JSON holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape), which no string field can carry" });
        noteRefusal(outcome, refusal);
        sendTrailersOnly(reply, 200, Object.entries(grpcErrorHeaders(refusal, req.headers["content-type"] ?? "")));
        return;
      }
      // Connect answers a codec it does not take with a bare 415: said here
      // what to send instead, in each protocol's own form.
      if (answered.status === 415 && answered.body === undefined) {
        const contentType = req.method === "GET" ? `encoding=${new URL(req.url, "http://x").searchParams.get("encoding") ?? "(none)"}` : (req.headers["content-type"] ?? "(none)");
        const refusal = apiError("UNSUPPORTED_MEDIA_TYPE", { contentType, rpc: true });
        noteRefusal(outcome, refusal);
        if (outcome.protocol !== "connect") {
          // PROTOCOL-HTTP2.md keeps 415 for content types that do not
          // begin with application/grpc; a gRPC client reads the status of
          // one that does (application/grpc+xml) from the headers alone.
          closeIfBodyUnread(req, reply);
          sendTrailersOnly(reply, 200, Object.entries(grpcErrorHeaders(refusal, contentType)));
          return;
        }
        answered = { ...answered, header: new Headers([...(answered.header ?? []), ["content-type", "application/json"]]), body: once(new TextEncoder().encode(connectErrorJson(refusal))) };
      }
      const { res: uRes, empty } = outcome.protocol === "grpc" ? await messageless(answered) : { res: answered, empty: false };
      if (bodyError === undefined) bodyError = inflation?.refusal;
      if (bodyError instanceof ConnectError) noteRefusal(outcome, bodyError);
      else if (outcome.rpc === undefined) outcome.code = refusalCode(uRes);
      // A gRPC-Web answer's status comes in its body: one no interceptor
      // saw (Connect refused the call first) is named when it is sent.
      if (outcome.protocol === "grpc-web" && uRes.body !== undefined) {
        uRes.body = watchingGrpcWebStatus(uRes.body, (code) => {
          if (outcome.rpc === undefined) outcome.code = codeName(code);
        }, uRes.header?.get("grpc-encoding"));
      }
      if (text && uRes.body !== undefined) {
        uRes.header = new Headers(uRes.header);
        uRes.header.set("content-type", grpcWebTextContentType);
        uRes.body = encodedTextBody(uRes.body);
      }
      closeIfBodyUnread(req, reply);
      // A Connect GET is cacheable (its protocol's point), and its answer's
      // encoding follows Accept-Encoding: shared caches must key on it.
      if (req.method === "GET") reply.header("vary", "Accept-Encoding");
      if (empty) {
        sendTrailersOnly(reply, uRes.status, [...(uRes.header ?? []), ...(uRes.trailer ?? [])]);
        return;
      }
      if (config.unary) opts.answerReady?.(req, reply);
      for (const [key, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(key, value);
      try {
        // It waits for an "end" event that Node's responses (HTTP/1.1 and
        // HTTP/2 alike) never emit: the answer is done when the response
        // closes, written whole or its client gone.
        await Promise.race([universalResponseToNodeResponse(uRes, reply.raw), closed]);
      } catch (error) {
        // The client went away mid-answer: nothing to tell it.
        if (!(error instanceof ConnectError)) throw error;
      }
    };
    // Only the methods Connect's handler takes (GET for a Connect GET of a
    // method without side effects); no HEAD, which no RPC protocol sends.
    const methods = [...new Set(handler.allowedMethods)];
    opts.methodsByPath?.set(handler.requestPath, methods);
    instance.route({
      method: methods,
      url: handler.requestPath,
      exposeHeadRoute: false,
      config,
      handler: async (req, reply) => {
        const outcome = opts.outcome(req);
        outcome.protocol = protocolOf(req.headers["content-type"]);
        const pass = opts.callPass?.(req);
        if (pass !== undefined && !pass.begin()) {
          // The client went away before the call began: nothing to run, nobody to answer.
          outcome.code = "canceled";
          reply.raw.end();
          return;
        }
        try {
          await serve(req, reply, outcome);
        } finally {
          pass?.end();
        }
      },
    });
  }
  done();
};

/**
 * HTTP/1.1 cannot read the next request on a connection before the rest of
 * an unread body: such a connection is closed after its answer instead.
 */
function closeIfBodyUnread(req: FastifyRequest, reply: FastifyReply): void {
  if (!(req.raw instanceof http2.Http2ServerRequest) && !req.raw.complete) reply.raw.shouldKeepAlive = false;
}

import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import { type DescMethod, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { apiError, reasonOf } from "../errors/api-error.js";
import type { InProcessCaller, ServiceRegistration } from "./in-process-caller.js";
import { lazyAbortSignal } from "./lazy-abort-signal.js";
import { codeName, type RpcOutcome, rpcOutcomeKey } from "./observe-interceptor.js";
import { RequestHeaders } from "./web-headers.js";

/** What one answered gRPC stream reports for the request log. */
export interface GrpcStreamDone {
  readonly requestId: string;
  readonly path: string;
  readonly outcome: RpcOutcome;
  readonly durationMs: number;
  /** False when the stream closed before the answer could be written. */
  readonly answered: boolean;
}

/** Options of the unary gRPC stream handler. */
export interface GrpcUnaryStreamOptions {
  readonly services: readonly ServiceRegistration[];
  /** Runs an RPC through the same interceptors as every other protocol. */
  readonly call: InProcessCaller;
  readonly readMaxBytes: number;
  /** The request id: the client's x-request-id when it is a valid one. */
  readonly requestId: (sent: string | string[] | undefined) => string;
  /** Turns an error raised outside the interceptors into a client-facing one. */
  readonly toError: (error: unknown, rpc: string) => ConnectError;
  /** Called once per stream taken: the request's log line. */
  readonly onDone: (done: GrpcStreamDone) => void;
  /** Called with anything that went wrong outside the call itself (writing the answer). */
  readonly onError: (error: unknown) => void;
}

/** Takes an HTTP/2 stream when it is a call this handler answers; false leaves it to the HTTP layer. */
export type StreamClaim = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean;

const okTrailers: Readonly<Record<string, string>> = Object.freeze({ "grpc-status": "0" });

function frame(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/** The stream's one request message, still framed; past the limit it stops reading (the answer then ends the stream). */
function readBody(stream: ServerHttp2Stream, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit + 5) {
        done();
        // The rest stays unread; the answer ends the stream after its trailers.
        stream.pause();
        reject(apiError("REQUEST_TOO_LARGE", { limitBytes: limit }));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      done();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    };
    // Closed before its end: the client went away, or reset the stream.
    const onClose = () => {
      done();
      reject(new Error("the request closed before its body ended"));
    };
    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("close", onClose);
  });
}

/**
 * Answers unary gRPC calls (application/grpc or application/grpc+proto,
 * uncompressed) to the API services on the HTTP/2 stream itself: read the
 * one message, decode it, run it through the in-process caller — the same
 * interceptors, authentication, error catalog and metrics as REST — and
 * write the answer and its status trailers.
 *
 * Connect's generic gRPC handler (streaming pipelines of async iterables, a
 * linked AbortController aborted per call) cost about three times the CPU
 * of the call it carries; answering through Fastify and Node's HTTP/2
 * compatibility layer still cost a third more CPU than a REST call of the
 * same RPC (profile of GetActiveVersion). So these calls are taken off the
 * stream before either sees them. Everything else — compressed or JSON
 * gRPC, gRPC-Web, Connect, the health and reflection streams, REST over
 * HTTP/2 — is left to Fastify and Connect.
 */
export function grpcUnaryStreamHandler(options: GrpcUnaryStreamOptions): StreamClaim {
  const methods = new Map<string, DescMethod>();
  for (const { service } of options.services) {
    for (const method of service.methods) if (method.methodKind === "unary") methods.set(`/${service.typeName}/${method.name}`, method);
  }

  const answer = async (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, method: DescMethod, path: string) => {
    const started = performance.now();
    const requestId = options.requestId(headers["x-request-id"]);
    const rpc = `${method.parent.typeName}/${method.name}`;
    const outcome: RpcOutcome = {};
    let responseHeaders: Record<string, string> = { "content-type": "application/grpc+proto", "x-request-id": requestId };
    let trailers: Readonly<Record<string, string>>;
    let body: Buffer | undefined;
    try {
      const raw = await readBody(stream, options.readMaxBytes);
      if (raw.length < 5 || raw.readUInt32BE(1) !== raw.length - 5) {
        throw apiError("MALFORMED_REQUEST", { problem: "a unary gRPC request carries exactly one length-prefixed message" });
      }
      if ((raw[0]! & 1) === 1) throw apiError("MALFORMED_REQUEST", { problem: "the message is flagged compressed without grpc-encoding" });
      let input: Message;
      try {
        input = fromBinary(method.input, raw.subarray(5));
      } catch (error) {
        throw apiError("MALFORMED_REQUEST", { problem: `the request message does not decode (${(error as Error).message})` });
      }
      const { message, header } = await options.call(method, input, {
        header: new RequestHeaders(headers),
        signal: lazyAbortSignal(stream),
        requestMethod: "POST",
        url: path,
        contextValues: createContextValues().set(rpcOutcomeKey, outcome),
      });
      if (header !== undefined) {
        responseHeaders = { ...responseHeaders };
        header.forEach((value, key) => (responseHeaders[key] = value));
      }
      body = frame(toBinary(method.output, message));
      trailers = okTrailers;
    } catch (error) {
      const failed = new Headers();
      const connectError = error instanceof ConnectError ? error : options.toError(error, rpc);
      setTrailerStatus(failed, connectError);
      trailers = Object.fromEntries(failed);
      // Failed before the interceptors saw it (a bad frame, too large).
      if (outcome.rpc === undefined) {
        const reason = reasonOf(connectError);
        Object.assign(outcome, { rpc, protocol: "grpc", code: codeName(connectError.code), ...(reason === undefined ? {} : { reason }) });
      }
    }
    let answered = false;
    try {
      if (!stream.destroyed && !stream.closed) {
        stream.respond({ ":status": 200, ...responseHeaders }, { waitForTrailers: true });
        stream.once("wantTrailers", () => {
          stream.sendTrailers(trailers);
          // A body left unread (past the limit) would keep the stream open
          // until the client resets it: end it, after the trailers, with
          // RST_STREAM NO_ERROR, as gRPC servers do.
          if (!stream.readableEnded) {
            setImmediate(() => {
              if (stream.closed) return;
              stream.close(http2.constants.NGHTTP2_NO_ERROR);
              stream.resume();
            });
          }
        });
        if (body === undefined) stream.end();
        else stream.end(body);
        answered = true;
      }
    } finally {
      options.onDone({ requestId, path, outcome, durationMs: performance.now() - started, answered });
    }
  };

  return (stream, headers) => {
    if (headers[":method"] !== "POST") return false;
    const contentType = headers["content-type"];
    if (contentType !== "application/grpc" && contentType !== "application/grpc+proto") return false;
    const encoding = headers["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    const path = headers[":path"];
    const method = path === undefined ? undefined : methods.get(path);
    if (method === undefined || path === undefined) return false;
    // A reset stream emits "error"; unhandled, it would end the process.
    stream.on("error", () => {});
    void answer(stream, headers, method, path).catch((error: unknown) => {
      options.onError(error);
      // Not answered yet: say so with a reset rather than leave the client
      // waiting; answered: its trailers are on their way.
      if (!stream.destroyed && !stream.headersSent) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    });
    return true;
  };
}

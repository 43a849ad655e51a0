import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { type DescMethod, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { ConnectError, type ContextValues } from "@connectrpc/connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { apiError } from "../errors/api-error.js";
import type { InProcessCaller, ServiceRegistration } from "./in-process-caller.js";
import { lazyAbortSignal } from "./lazy-abort-signal.js";
import { RequestHeaders } from "./web-headers.js";

/** Options of the fast path. */
export interface GrpcFastPathOptions {
  readonly services: readonly ServiceRegistration[];
  /** Runs an RPC through the same interceptors as every other protocol. */
  readonly call: InProcessCaller;
  readonly readMaxBytes: number;
  readonly contextValues: (req: FastifyRequest) => ContextValues;
  /** Turns an error raised outside the interceptors into a client-facing one. */
  readonly toError: (error: unknown, rpc: string) => ConnectError;
}

/**
 * The request body, read with listeners rather than `for await`: the async
 * iterator and its end-of-stream tracking were ~1.5% of a gRPC read's CPU.
 * Past the limit the request is destroyed, as returning from `for await`
 * would.
 */
function readBody(req: Http2ServerRequest, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit + 5) {
        done();
        req.destroy();
        reject(apiError("REQUEST_TOO_LARGE", { limitBytes: limit }));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      done();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    };
    const onError = (error: Error) => {
      done();
      reject(error);
    };
    // Closed before its end: the client went away mid-request.
    const onClose = () => {
      done();
      reject(new Error("the request closed before its body ended"));
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

const okTrailers: Readonly<Record<string, string>> = Object.freeze({ "grpc-status": "0" });

function frame(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/**
 * Answers unary gRPC calls (application/grpc or application/grpc+proto,
 * uncompressed) to the API services directly: read the one message, decode
 * it, run it through the in-process caller — the same interceptors,
 * authentication, error catalog and metrics as REST — and write the answer
 * and its status trailers. Profiling showed Connect's generic gRPC handler
 * (streaming pipelines of async iterables, a linked AbortController aborted
 * per call) costing about three times the CPU of the call it carries; this
 * path is a unary special case of the same protocol. Everything else —
 * compressed or JSON gRPC, gRPC-Web, Connect, the health and reflection
 * streams — is left to Connect.
 */
export function registerGrpcUnaryFastPath(app: FastifyInstance, options: GrpcFastPathOptions): void {
  const methods = new Map<string, DescMethod>();
  for (const { service } of options.services) {
    for (const method of service.methods) if (method.methodKind === "unary") methods.set(`/${service.typeName}/${method.name}`, method);
  }

  const handle = async (req: FastifyRequest, res: Http2ServerResponse, method: DescMethod) => {
    const raw2 = req.raw as unknown as Http2ServerRequest;
    const rpc = `${method.parent.typeName}/${method.name}`;
    let trailers: Readonly<Record<string, string>>;
    let body: Buffer | undefined;
    try {
      const raw = await readBody(raw2, options.readMaxBytes);
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
        header: new RequestHeaders(raw2.headers),
        signal: lazyAbortSignal(res),
        requestMethod: "POST",
        url: req.url,
        contextValues: options.contextValues(req),
      });
      header?.forEach((value, key) => res.setHeader(key, value));
      body = frame(toBinary(method.output, message));
      trailers = okTrailers;
    } catch (error) {
      const failed = new Headers();
      setTrailerStatus(failed, error instanceof ConnectError ? error : options.toError(error, rpc));
      trailers = Object.fromEntries(failed);
    }
    if (res.destroyed || res.writableEnded) return;
    res.setHeader("content-type", "application/grpc+proto");
    res.setHeader("x-request-id", req.id);
    res.writeHead(200);
    res.addTrailers(trailers);
    if (body === undefined) res.end();
    else res.end(body);
  };

  app.addHook("onRequest", async (req, reply) => {
    if (req.method !== "POST" || req.raw.httpVersionMajor !== 2) return;
    const contentType = req.headers["content-type"];
    if (contentType !== "application/grpc" && contentType !== "application/grpc+proto") return;
    const encoding = req.headers["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") return;
    const method = methods.get(req.url);
    if (method === undefined) return;
    reply.hijack();
    void handle(req, reply.raw as unknown as Http2ServerResponse, method).catch((error: unknown) => {
      req.log.error({ err: error }, "gRPC fast path failed");
      if (!reply.raw.headersSent) reply.raw.destroy();
    });
  });
}

import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { createAsyncIterable, encodeEnvelope, type UniversalHandler, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { createTrailerSerialization, trailerFlag } from "@connectrpc/connect/protocol-grpc-web";
import { apiError } from "../errors/api-error.js";
import { rpcOutcomeKey } from "./observe-interceptor.js";

// connect-es reports a request body that does not decode as protobuf as
// INTERNAL ("parse binary: …", HTTP 500), before any interceptor runs. The
// client sent it, so it is relabelled here as the catalog's
// MALFORMED_REQUEST (INVALID_ARGUMENT), as connect-go and the REST gateway
// answer it. Only that one error is touched; everything else passes as is.

const decodeError = (error: ConnectError | undefined): error is ConnectError =>
  error !== undefined && error.code === Code.Internal && error.rawMessage.startsWith("parse binary:");

function malformed(error: ConnectError): ConnectError {
  return apiError("MALFORMED_REQUEST", { problem: `the request message does not decode (${error.rawMessage.slice("parse binary:".length).trim()})` });
}

async function firstChunk(body: AsyncIterable<Uint8Array>): Promise<{ first: Uint8Array | undefined; rest: AsyncIterator<Uint8Array> }> {
  const rest = body[Symbol.asyncIterator]();
  const next = await rest.next();
  return { first: next.done === true ? undefined : next.value, rest };
}

function prepend(first: Uint8Array | undefined, rest: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  return {
    async *[Symbol.asyncIterator]() {
      if (first !== undefined) yield first;
      for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
    },
  };
}

const grpcWebTrailers = createTrailerSerialization();

async function relabel(res: UniversalServerResponse, onRelabel: (protocol: string) => void): Promise<UniversalServerResponse> {
  const contentType = res.header?.get("content-type") ?? "";
  // gRPC: the status travels in trailers, already set when the handler resolves.
  if (res.trailer !== undefined && contentType.startsWith("application/grpc") && !contentType.startsWith("application/grpc-web")) {
    const error = findTrailerError(res.trailer);
    if (decodeError(error)) {
      setTrailerStatus(res.trailer, malformed(error));
      onRelabel("grpc");
    }
    return res;
  }
  if (res.body === undefined || !(Symbol.asyncIterator in res.body)) return res;
  // gRPC-Web: an error answer is a single trailer frame in the body.
  if (contentType.startsWith("application/grpc-web")) {
    const { first, rest } = await firstChunk(res.body);
    if (first !== undefined && first[0] === trailerFlag) {
      const trailer = grpcWebTrailers.parse(first.subarray(5));
      const error = findTrailerError(trailer);
      if (decodeError(error)) {
        const fixed = new Headers();
        setTrailerStatus(fixed, malformed(error));
        onRelabel("grpc-web");
        return { ...res, body: createAsyncIterable([encodeEnvelope(trailerFlag, grpcWebTrailers.serialize(fixed))]) };
      }
    }
    return { ...res, body: prepend(first, rest) };
  }
  // Connect unary: HTTP 500 with a JSON error body.
  if (res.status === 500 && contentType.startsWith("application/json")) {
    const { first, rest } = await firstChunk(res.body);
    let error: ConnectError | undefined;
    try {
      error = first === undefined ? undefined : errorFromJsonBytes(first, undefined, new ConnectError("", Code.Internal));
    } catch {
      error = undefined;
    }
    if (decodeError(error)) {
      const body = errorToJsonBytes(malformed(error), {});
      const header = new Headers(res.header);
      header.set("content-length", String(body.byteLength));
      onRelabel("connect");
      return { ...res, status: 400, header, body: createAsyncIterable([body]) };
    }
    return { ...res, body: prepend(first, rest) };
  }
  return res;
}

/**
 * Wraps every handler of the router so that an undecodable request body is
 * answered INVALID_ARGUMENT (MALFORMED_REQUEST) on gRPC, gRPC-Web and
 * Connect. Each is recorded in the request's log outcome, and `onRelabel`
 * learns of it (with the protocol) for metrics, since no
 * interceptor saw the call.
 */
export function relabelDecodeErrors(router: ConnectRouter, onRelabel: (handler: UniversalHandler, protocol: string) => void): void {
  const handlers = router.handlers as UniversalHandler[];
  handlers.forEach((handler, i) => {
    const rpc = `${handler.service.typeName}/${handler.method.name}`;
    const wrapped = Object.assign(
      async (req: Parameters<UniversalHandler>[0]) =>
        relabel(await handler(req), (protocol) => {
          const outcome = req.contextValues?.get(rpcOutcomeKey);
          if (outcome !== undefined) Object.assign(outcome, { protocol, rpc, code: "invalid_argument", reason: "MALFORMED_REQUEST" });
          onRelabel(handler, protocol);
        }),
      handler,
    );
    handlers[i] = wrapped as UniversalHandler;
  });
}

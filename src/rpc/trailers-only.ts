import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { type ConnectError, encodeBinaryHeader } from "@connectrpc/connect";
import type { FastifyReply } from "fastify";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { minimalGrpcMessage } from "./grpc-message.js";

/** The details of an error as google.rpc.Any messages, as a google.rpc.Status carries them. */
export function packedDetails(error: ConnectError) {
  return error.details.flatMap((d) => ("desc" in d ? [anyPack(d.desc, create(d.desc, d.value as MessageInitShape<typeof d.desc>))] : []));
}

/**
 * The headers of a gRPC or gRPC-Web error answered Trailers-Only (HTTP 200,
 * the status in the one HEADERS frame that ends the stream), for answers
 * the server writes itself, where Connect's handler does not answer: the
 * status, its message (encoded as PROTOCOL-HTTP2.md asks) and its details
 * (grpc-status-details-bin), as Connect's own errors carry them.
 */
export function grpcErrorHeaders(error: ConnectError, contentType: string): Record<string, string> {
  const status = create(StatusSchema, { code: error.code, message: error.rawMessage, details: packedDetails(error) });
  return {
    "content-type": contentType.toLowerCase().startsWith("application/grpc-web") ? "application/grpc-web+proto" : "application/grpc",
    "grpc-status": String(error.code),
    "grpc-message": minimalGrpcMessage(encodeURIComponent(error.rawMessage.toWellFormed())),
    "grpc-status-details-bin": encodeBinaryHeader(toBinary(StatusSchema, status)),
  };
}

/**
 * Ends the response with these headers and no body. Node's compatibility
 * layer sends headers set before end() in one HEADERS frame with
 * END_STREAM, which gRPC clients read as a Trailers-Only status. The
 * headers Fastify's hooks set on the reply (x-request-id) go too.
 */
export function sendTrailersOnly(reply: FastifyReply, status: number, headers: Iterable<[string, string]>): void {
  reply.raw.statusCode = status;
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(name, value);
  for (const [name, value] of headers) reply.raw.setHeader(name, value);
  reply.raw.end();
}

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

/** A gRPC or gRPC-Web content type as PROTOCOL-HTTP2.md and PROTOCOL-WEB.md write it: the protocol, then an optional codec. */
const grpcContentType = /^application\/grpc(?:-web(?:-text)?)?(?:\+[a-z0-9][a-z0-9._-]*)?$/;

/**
 * The content type of a gRPC or gRPC-Web answer to a request of this
 * content type: the request's own protocol and codec, as gRPC servers
 * answer (grpc-go writes the request's content-subtype back). Clients hold
 * the answer to it: connect-go's gRPC and gRPC-Web clients take an answer
 * in another codec (`application/grpc` to an `application/grpc+json` call)
 * for a broken server, INTERNAL "invalid content-type", and never read
 * the status it carries. Parameters are dropped; a type outside the
 * grammar gets the protocol's default.
 */
export function grpcAnswerContentType(contentType: string): string {
  const type = contentType.split(";", 1)[0]!.trim().toLowerCase();
  if (grpcContentType.test(type)) return type;
  return type.startsWith("application/grpc-web") ? "application/grpc-web+proto" : "application/grpc";
}

/**
 * The headers of a gRPC or gRPC-Web error answered Trailers-Only (HTTP 200,
 * the status in the one HEADERS frame that ends the stream), for answers
 * the server writes itself, where Connect's handler does not answer: the
 * content type the request's codec calls for, the status, its message
 * (encoded as PROTOCOL-HTTP2.md asks) and its details
 * (grpc-status-details-bin), as Connect's own errors carry them.
 */
export function grpcErrorHeaders(error: ConnectError, contentType: string): Record<string, string> {
  const status = create(StatusSchema, { code: error.code, message: error.rawMessage, details: packedDetails(error) });
  return {
    "content-type": grpcAnswerContentType(contentType),
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

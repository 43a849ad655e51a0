/**
 * gRPC-Web's text form (PROTOCOL-WEB.md: `application/grpc-web-text`, "text-encoded
 * streams of application/grpc-web"), served by translating its bodies to
 * and from the binary form Connect implements. Why: Google's grpc-web
 * client sends it by default, and reads server streams (WatchEvents) only
 * in it.
 */

import { apiError } from "../errors/api-error.js";

const textContentType = /^application\/grpc-web-text(?:\+proto)?$/;

/**
 * Whether a request's content type is gRPC-Web's text form (protobuf, its
 * only codec in that form; parameters aside).
 */
export function isGrpcWebText(contentType: string | null | undefined): boolean {
  return contentType !== null && contentType !== undefined && textContentType.test(contentType.split(";", 1)[0]!.trim().toLowerCase());
}

/** The binary content type Connect is given for a text request. */
export const grpcWebBinaryContentType = "application/grpc-web+proto";

/** The content type of an answer to a text request. */
export const grpcWebTextContentType = "application/grpc-web-text+proto";

const base64Char = /^[A-Za-z0-9+/=]*$/;

/**
 * A text request's body as the bytes it encodes. A client may send its
 * messages as separate base64 runs, each padded: the text is decoded in
 * groups of four characters, each run that ends in padding on its own (a
 * base64 decoder stops at the first `=`). Anything that is not base64
 * (whitespace aside) ends the body with MALFORMED_REQUEST.
 */
export async function* decodedTextBody(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let pending = "";
  for await (const chunk of body) {
    pending += Buffer.from(chunk).toString("latin1").replace(/\s+/g, "");
    // Looked at as it comes, not once a group is whole: a stray character
    // in the last group is named for what it is.
    if (!base64Char.test(pending)) throw notBase64();
    const whole = pending.length - (pending.length % 4);
    if (whole === 0) continue;
    const bytes = decodeGroups(pending.slice(0, whole));
    pending = pending.slice(whole);
    if (bytes.byteLength > 0) yield bytes;
  }
  if (pending.length > 0) throw apiError("MALFORMED_REQUEST", { problem: "its gRPC-Web text body ends partway through a base64 group of four characters" });
}

function notBase64() {
  return apiError("MALFORMED_REQUEST", { problem: "its gRPC-Web text body is not base64" });
}

function decodeGroups(text: string): Uint8Array {
  // Runs that end in padding: each decoded on its own.
  const runs = text.split(/(?<==)(?=[^=])/);
  return runs.length === 1 ? Buffer.from(text, "base64") : Buffer.concat(runs.map((run) => Buffer.from(run, "base64")));
}

/**
 * An answer's bytes in the text form: each chunk base64-encoded on its own,
 * padded, as it comes, so that a streamed message is not held back for the
 * next. Clients decode runs of four characters whatever padding they hold
 * (PROTOCOL-WEB.md's text streams; Google's grpc-web client, Envoy).
 */
export async function* encodedTextBody(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  for await (const chunk of body) {
    if (chunk.byteLength > 0) yield Buffer.from(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString("base64"), "latin1");
  }
}

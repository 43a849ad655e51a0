import { isUtf8 } from "node:buffer";
import type { ConnectError } from "@connectrpc/connect";
import { notUtf8Json } from "../http/utf8-json.js";

/**
 * Connect decodes the JSON messages of every protocol with a lenient
 * TextDecoder, which its router's options offer no way to replace: bytes that are
 * not UTF-8 would become U+FFFD, and be stored or quoted back so. The
 * messages are looked at here first, refused as REST refuses such a body:
 * a bare or enveloped one as it is read (utf8JsonMessages), a compressed
 * one once inflated, a Connect GET's from its URL.
 */

/** The JSON content types as Connect reads them (Connect unary and streaming, gRPC, gRPC-Web); the group is set for the enveloped ones. */
const jsonContentType = /^application\/(?:(connect|grpc|grpc-web)\+)?json(?:; ?charset=utf-?8)?$/i;

/** The refusal of one JSON request message, when it is not UTF-8: what Connect would otherwise decode with U+FFFD in place of its bytes. */
export function notUtf8Message(message: Uint8Array): ConnectError | undefined {
  return isUtf8(message) ? undefined : notUtf8Json("a request message");
}

/**
 * How a request body of this content type carries JSON messages: bare
 * (Connect unary), in envelopes, or not at all (undefined), so that only
 * JSON bodies pay for the UTF-8 check, and enveloped ones are checked
 * message by message.
 */
export function jsonFraming(contentType: string | null): "bare" | "enveloped" | undefined {
  const match = contentType === null ? null : jsonContentType.exec(contentType);
  if (match === null) return undefined;
  return match[1] === undefined ? "bare" : "enveloped";
}

/**
 * A request body of uncompressed JSON messages, passed on unchanged,
 * refused (notUtf8Json) at the first message that is not UTF-8. A bare
 * body is one message; an envelope's message is looked at unless its
 * flags say compressed (or anything else). A message is held as views of
 * the chunks Connect gathers too, until it is whole.
 */
export async function* utf8JsonMessages(source: AsyncIterable<Uint8Array>, framing: "bare" | "enveloped"): AsyncGenerator<Uint8Array, void, undefined> {
  const check = (pieces: Uint8Array[]) => {
    const refusal = notUtf8Message(pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces));
    if (refusal !== undefined) throw refusal;
  };
  if (framing === "bare") {
    const pieces: Uint8Array[] = [];
    for await (const chunk of source) {
      pieces.push(chunk);
      yield chunk;
    }
    check(pieces);
    return;
  }
  // The current envelope: its 5-byte prefix so far, the message bytes
  // still to come, and its pieces (undefined when it is not looked at).
  const prefix = Buffer.alloc(5);
  let prefixBytes = 0;
  let left = 0;
  let pieces: Uint8Array[] | undefined;
  for await (const chunk of source) {
    for (let at = 0; at < chunk.byteLength; ) {
      if (prefixBytes < 5) {
        const n = Math.min(5 - prefixBytes, chunk.byteLength - at);
        prefix.set(chunk.subarray(at, at + n), prefixBytes);
        prefixBytes += n;
        at += n;
        if (prefixBytes < 5) break;
        left = prefix.readUInt32BE(1);
        pieces = prefix[0] === 0 ? [] : undefined;
      }
      const n = Math.min(left, chunk.byteLength - at);
      pieces?.push(chunk.subarray(at, at + n));
      at += n;
      left -= n;
      if (left === 0) {
        if (pieces !== undefined) check(pieces);
        prefixBytes = 0;
      }
    }
    yield chunk;
  }
}

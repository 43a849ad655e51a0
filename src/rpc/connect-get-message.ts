import { base64Decode } from "@bufbuild/protobuf/wire";
import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";
import { notUtf8Message } from "./utf8-messages.js";

/**
 * A Connect GET's URL with an empty request message in place of the one it
 * carried, uncompressed: what a call refused from its headers is given, so
 * that nothing it sent is decoded or inflated.
 */
export function withEmptyGetMessage(url: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set("message", parsed.searchParams.get("encoding") === "json" ? "{}" : "");
  parsed.searchParams.delete("compression");
  parsed.searchParams.delete("base64");
  return parsed.toString();
}

/** What base64Decode (@bufbuild/protobuf) reads: both alphabets, padding anywhere, white-space. */
const base64Text = /^[A-Za-z0-9+/_\-=\n\r\t ]*$/;

/**
 * The bytes a query value stands for: URLSearchParams reads them as UTF-8,
 * with U+FFFD for any that are not, which Connect then encodes back.
 * Characters other than escapes are each one byte as sent: HTTP/1.1's
 * parser refuses a raw byte past 0x7E in a URL, and HTTP/2's `:path`
 * reaches Node as Latin-1, a character per byte. Such a byte is read as
 * REST reads one in a path or a query over HTTP/2, as its Latin-1
 * character, not refused; but a message whose bytes as sent are not
 * UTF-8 is refused, as any JSON message is.
 */
function queryValueBytes(raw: string): Buffer {
  const parts: Buffer[] = [];
  let last = 0;
  for (const escapes of raw.matchAll(/(?:%[0-9A-Fa-f]{2})+/g)) {
    parts.push(Buffer.from(raw.slice(last, escapes.index), "latin1"), Buffer.from(escapes[0].replaceAll("%", ""), "hex"));
    last = escapes.index + escapes[0].length;
  }
  parts.push(Buffer.from(raw.slice(last), "latin1"));
  return Buffer.concat(parts);
}

/**
 * Why a Connect GET's message cannot be read, if it cannot. Connect
 * decodes a base64 one with a plain Error on a character outside base64,
 * which it answers INTERNAL, as a bug: a client's malformed URL must be
 * its own INVALID_ARGUMENT, like any message that does not decode. And a
 * JSON one that is not UTF-8 is refused, as every JSON message is
 * (utf8-messages); a compressed one is looked at once inflated.
 */
export function getMessageRefusal(url: string): ConnectError | undefined {
  const query = url.indexOf("?");
  if (query < 0) return undefined;
  const params = new URLSearchParams(url.slice(query + 1));
  const message = params.get("message");
  if (message === null) return undefined;
  const base64 = params.get("base64") === "1";
  if (base64 && !base64Text.test(message)) {
    return apiError("MALFORMED_REQUEST", { problem: "its `message` parameter is not base64 (with `base64=1`, the message is base64url, as Connect GET requests send it)" });
  }
  const compression = params.get("compression");
  if (params.get("encoding") !== "json" || (compression !== null && compression !== "identity")) return undefined;
  let bytes: Uint8Array;
  if (base64) bytes = base64Decode(message);
  else {
    // The first `message`, as URLSearchParams.get reads it, as sent.
    const raw = url
      .slice(query + 1)
      .split("&")
      .find((pair) => new URLSearchParams(pair).has("message"));
    if (raw === undefined) return undefined;
    const equals = raw.indexOf("=");
    bytes = queryValueBytes(equals < 0 ? "" : raw.slice(equals + 1));
  }
  return notUtf8Message(bytes);
}

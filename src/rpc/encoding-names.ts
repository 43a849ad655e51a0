/** The request headers that name content codings, on the three RPC protocols. */
const encodingHeaders = ["grpc-encoding", "grpc-accept-encoding", "content-encoding", "connect-content-encoding", "connect-accept-encoding", "accept-encoding"];

/**
 * Lowercases the content-coding names a request's headers give. HTTP
 * says they are case-insensitive (RFC 9110, 8.4.1: "GZIP" is gzip), and
 * some clients send them so; Connect compares them exactly, and would
 * refuse such a body as compressed with an encoding it does not know.
 */
export function lowercaseEncodingNames(header: Headers): void {
  for (const name of encodingHeaders) {
    const value = header.get(name);
    if (value !== null && value !== value.toLowerCase()) header.set(name, value.toLowerCase());
  }
}

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
 * What is wrong with a Connect GET's base64 message, if anything. Connect
 * decodes it with a plain Error on a character outside base64, which it
 * answers INTERNAL, as a bug: a client's malformed URL must be its own
 * INVALID_ARGUMENT, like any message that does not decode.
 */
export function getMessageProblem(url: string): string | undefined {
  const query = url.indexOf("?");
  if (query < 0) return undefined;
  const params = new URLSearchParams(url.slice(query + 1));
  if (params.get("base64") !== "1") return undefined;
  const message = params.get("message");
  if (message === null || base64Text.test(message)) return undefined;
  return "its `message` parameter is not base64 (with `base64=1`, the message is base64url, as Connect GET requests send it)";
}

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

/** The request headers that name how the request's own body is compressed. */
const bodyEncodingHeaders = ["grpc-encoding", "content-encoding", "connect-content-encoding"];

const compressed = (coding: string | null | undefined): boolean => {
  const name = coding?.trim().toLowerCase();
  return name !== undefined && name !== "" && name !== "identity";
};

/**
 * Whether a request's message comes compressed: a body under a
 * content-coding (gRPC's `grpc-encoding`, Connect's `content-encoding` or
 * `connect-content-encoding`), or a Connect GET's `compression` parameter.
 * Such a message inflates to as much as the read limit, however few bytes
 * it took on the wire.
 */
export function namesCompression(method: string, url: string, header: Readonly<Record<string, string | string[] | undefined>>): boolean {
  if (method === "GET") {
    const query = url.indexOf("?");
    return query >= 0 && compressed(new URLSearchParams(url.slice(query + 1)).get("compression"));
  }
  return bodyEncodingHeaders.some((name) => {
    const value = header[name];
    return compressed(Array.isArray(value) ? value.join(",") : value);
  });
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

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

/** The request headers that name the content coding of a request's messages: gRPC and gRPC-Web, Connect unary, Connect streaming. */
const requestCodingHeaders = ["grpc-encoding", "content-encoding", "connect-content-encoding"];

/**
 * Whether Connect may decompress a request's messages: a POST whose
 * headers name a content coding other than identity (once lowercased, by
 * lowercaseEncodingNames), or a Connect GET whose query does
 * (`compression=`). Connect decompresses only a message whose request
 * names a coding; any other name, even one it does not take, counts here,
 * so that this errs towards yes.
 */
export function mayBeCompressed(method: string, header: Headers, url: string): boolean {
  const named = (coding: string | null) => coding !== null && coding.trim().toLowerCase() !== "identity";
  if (method === "GET") return new URL(url, "http://x").searchParams.getAll("compression").some(named);
  return requestCodingHeaders.some((name) => named(header.get(name)));
}

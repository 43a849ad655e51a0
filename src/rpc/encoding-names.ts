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

const encoder = new TextEncoder();

/**
 * A `grpc-message` value percent-encoded as PROTOCOL-HTTP2.md asks of a
 * sender: only `%` and the bytes outside 0x20–0x7E (the UTF-8 of anything
 * not printable ASCII) are encoded.
 *
 * Why: Connect writes the message with `encodeURIComponent`, which also
 * encodes `:`, `,`, `/`, `?`, `=` and the like. That is a valid encoding, but
 * @grpc/grpc-js decodes with `decodeURI`, which leaves exactly those escapes
 * in place, so grpc-js users would read "Invalid version_id%3A …". The
 * minimal encoding decodes the same in every client: grpc-js, grpc-go and
 * Connect's own `decodeURIComponent`.
 */
export function minimalGrpcMessage(connectEncoded: string): string {
  let text: string;
  try {
    text = decodeURIComponent(connectEncoded);
  } catch {
    // Not ours to repair: pass it on as it came.
    return connectEncoded;
  }
  let out = "";
  for (const byte of encoder.encode(text)) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

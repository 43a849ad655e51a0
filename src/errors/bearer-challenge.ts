import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonOf } from "./api-error.js";

/**
 * The `WWW-Authenticate` challenge of an UNAUTHENTICATED error, which
 * RFC 9110 (15.5.2) requires of every 401 and RFC 6750 (3) shapes: the
 * scheme, and for a token the client sent, `invalid_token` and why.
 * Undefined for any other error. REST and Connect answer it as a header;
 * gRPC carries it in the trailers.
 */
export function bearerChallenge(error: ConnectError): string | undefined {
  if (error.code !== Code.Unauthenticated) return undefined;
  if (reasonOf(error) === "AUTH_REQUIRED") return 'Bearer realm="entity-versions"';
  return `Bearer realm="entity-versions", error="invalid_token", error_description="${error.rawMessage.replace(/["\\]/g, "'").replace(/[^\x20-\x7e]/g, "?")}"`;
}

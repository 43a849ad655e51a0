import type { Reason } from "../errors/catalog.js";

/**
 * The errors any REST route can answer, whatever its RPC declares in the
 * proto: a field that does not decode or that the RPC refuses
 * (INVALID_ARGUMENT), a request that cannot be read (MALFORMED_REQUEST),
 * an HTTP/1.1 URL and headers past Node's limit, which a long token or a
 * proxy's added headers can reach (REQUEST_HEADERS_TOO_LARGE), the call's
 * deadline passing (DEADLINE_EXCEEDED), the server stopping
 * (SHUTTING_DOWN), a bug (INTERNAL). The OpenAPI document adds them to
 * every operation.
 */
export const everyRouteReasons: readonly Reason[] = ["INVALID_ARGUMENT", "MALFORMED_REQUEST", "REQUEST_HEADERS_TOO_LARGE", "DEADLINE_EXCEEDED", "SHUTTING_DOWN", "INTERNAL"];

/**
 * The errors of reading a request body: a content type other than JSON,
 * a body over the limit, one that does not arrive in time, more bodies in
 * flight than the connection or the server holds. Fastify reads a body for
 * every method but GET and HEAD, whether or not the RPC's rule takes one.
 */
export const bodyReasons: readonly Reason[] = ["UNSUPPORTED_MEDIA_TYPE", "UNSUPPORTED_CONTENT_ENCODING", "REQUEST_TOO_LARGE", "REQUEST_BODY_TIMEOUT", "IN_FLIGHT_BYTES_EXCEEDED"];

/**
 * The errors of being let in: a unary call past the calls the connection
 * or the server may have running (TOO_MANY_CALLS). Streams (watches) have
 * caps of their own.
 */
export const unaryReasons: readonly Reason[] = ["TOO_MANY_CALLS"];

/**
 * The error of a request whose method takes no body (GET) but whose
 * headers announce one without its length (chunked): it is waited for, to
 * refuse a body the route does not take, and may never come.
 */
export const announcedBodyReasons: readonly Reason[] = ["REQUEST_BODY_TIMEOUT"];

/** Whether requests with this HTTP method have their body read, and can meet bodyReasons. */
export function readsBody(verb: string): boolean {
  return verb !== "GET" && verb !== "HEAD";
}

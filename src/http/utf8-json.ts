import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";

/**
 * The refusal of JSON that is not UTF-8, on every protocol that takes
 * JSON. JSON between systems is UTF-8 (RFC 8259, 8.1); a decoder not told
 * otherwise reads other bytes as U+FFFD, and what was sent would be
 * stored, or quoted back, as something else. `what` names the JSON: "the
 * body", "a request message".
 */
export function notUtf8Json(what: string): ConnectError {
  return apiError("MALFORMED_REQUEST", { problem: `${what} is not UTF-8: send JSON encoded in UTF-8, as RFC 8259 asks` });
}

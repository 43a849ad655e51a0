import type { ServerResponse } from "node:http";
import { Http2ServerResponse } from "node:http2";

// Node documents a response's "close" event, not a property of an HTTP/1.1
// response that says it has happened: the event is noted here, by the
// first hook every request passes, before anything awaits.
const closed = new WeakSet<ServerResponse | Http2ServerResponse>();

/**
 * Notes when `res` closes, so that a handler that runs after an await (the
 * token's check) can ask whether its client is still there. Called once
 * per response, as it arrives.
 */
export function noteClose(res: ServerResponse | Http2ServerResponse): void {
  res.once("close", () => closed.add(res));
}

/**
 * Whether `res` has closed: answered, or its client gone (an HTTP/1.1
 * connection closed, an HTTP/2 stream reset), so that a call begun now
 * would work for nobody. An HTTP/2 stream's own state is asked too: it is
 * documented, and covers a reset before the response was noted.
 */
export function hasClosed(res: ServerResponse | Http2ServerResponse): boolean {
  return closed.has(res) || (res instanceof Http2ServerResponse && (res.stream.closed || res.stream.destroyed));
}

import { apiError } from "../errors/api-error.js";
import type { BodyTicket } from "./body-budget.js";

/** What a request body is read against. */
export interface BodyGuard {
  /** The request's share of the body budget. */
  readonly ticket: BodyTicket;
  /**
   * How long the whole body may take to arrive (REQUEST_BODY_TIMEOUT), a
   * bidirectional call's stream of requests too: its bytes count against
   * the budget until its call ends, so it may not stay open at will.
   */
  readonly timeoutMs: number;
  /** What is left of the client's own deadline, when it set one: past it, reading ends DEADLINE_EXCEEDED. */
  readonly deadlineMs?: number | undefined;
  /**
   * Settles when the request has been answered (or its client went away):
   * whoever was reading the body may have stopped, so reading ends too.
   */
  readonly answered: Promise<void>;
}

/**
 * A request body read against its guard: each chunk is counted against the
 * connection's and the process's budget before it is passed on, and the
 * whole body must arrive within the timeout and the client's deadline. Past either, reading stops with
 * the catalog's error (IN_FLIGHT_BYTES_EXCEEDED, REQUEST_BODY_TIMEOUT),
 * which every protocol answers in its own form, so a client that sends
 * slowly or too much holds neither memory nor a stream for long. Once the
 * request is answered the body simply ends: a reader that gave up early
 * (Fastify past its body limit) is not left with a timer that fails later
 * with nobody listening.
 */
export async function* guardedBody(source: AsyncIterable<Uint8Array>, guard: BodyGuard): AsyncGenerator<Uint8Array, void, undefined> {
  const it = source[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  // The nearer of the two limits; a client's deadline is its to set, and
  // holds for the body as for the rest of the call.
  const { timeoutMs, deadlineMs } = guard;
  const byDeadline = deadlineMs !== undefined && deadlineMs < timeoutMs;
  const limitMs = byDeadline ? deadlineMs : timeoutMs;
  const timedOut = new Promise<never>((_, reject) => {
    const error = () => (byDeadline ? apiError("DEADLINE_EXCEEDED", {}) : apiError("REQUEST_BODY_TIMEOUT", { timeoutMs: limitMs }));
    timer = setTimeout(() => reject(error()), limitMs);
  });
  // Settled by the timer even when nobody races it any more.
  timedOut.catch(() => undefined);
  const answered = guard.answered.then((): IteratorReturnResult<undefined> => ({ done: true, value: undefined }));
  try {
    for (;;) {
      const next = await Promise.race([it.next(), timedOut, answered]);
      if (next.done === true) return;
      const refused = next.value.byteLength === 0 ? undefined : guard.ticket.take(next.value.byteLength);
      if (refused !== undefined) throw apiError("IN_FLIGHT_BYTES_EXCEEDED", refused);
      yield next.value;
    }
  } finally {
    // The source is left as it is: ending it would destroy the request's
    // stream, and with it the answer still to be written. Unread, it is
    // paused, so flow control stops the client; the HTTP layer closes the
    // stream or connection once the answer is written.
    clearTimeout(timer);
  }
}

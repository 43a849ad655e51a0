import { createContextKey, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";

/** The connection (socket, or HTTP/2 session) a call arrived on, where the server knows it. */
export const connectionKey = createContextKey<object | undefined>(undefined, { description: "the call's connection" });

/**
 * Caps the streams open at once through the services that need no token
 * (health Watch, reflection): anyone who reaches the port may open them,
 * each lives until its client ends it, and each holds tens of kilobytes,
 * so without a cap one client opening streams on connection after
 * connection would fill the heap. A stream past the cap is refused at
 * once (RESOURCE_EXHAUSTED `TOO_MANY_STREAMS`); its place is freed when
 * its answer ends, however it ends. One connection may hold a quarter of
 * the places (at least one), so that a single client cannot take them all
 * from everyone else's health checks. Unary calls (Health/Check) are not
 * counted: the call gate bounds them.
 */
export function openStreamsInterceptor(max: number): Interceptor {
  const perConnection = Math.max(1, Math.floor(max / 4));
  const byConnection = new WeakMap<object, number>();
  let open = 0;
  return (next) => async (req) => {
    if (!req.stream) return next(req);
    const connection = req.contextValues.get(connectionKey);
    const mine = connection === undefined ? 0 : (byConnection.get(connection) ?? 0);
    if (mine >= perConnection) throw apiError("TOO_MANY_STREAMS", { limit: perConnection, scope: "connection" });
    if (open >= max) throw apiError("TOO_MANY_STREAMS", { limit: max, scope: "server" });
    open++;
    if (connection !== undefined) byConnection.set(connection, mine + 1);
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      open--;
      if (connection !== undefined) byConnection.set(connection, (byConnection.get(connection) ?? 1) - 1);
    };
    // An answer that is never iterated (its call ended before the first
    // message was asked for) never runs its generator's finally; the call's
    // signal ending frees the place then.
    req.signal.addEventListener("abort", release, { once: true });
    try {
      const res = (await next(req)) as StreamResponse;
      return { ...res, message: released(res.message, release) };
    } catch (error) {
      release();
      throw error;
    }
  };
}

async function* released<T>(messages: AsyncIterable<T>, release: () => void): AsyncGenerator<T> {
  try {
    yield* messages;
  } finally {
    release();
  }
}

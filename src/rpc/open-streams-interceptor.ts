import type { Interceptor, StreamResponse } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";

/**
 * Caps the streams open at once through the services that need no token
 * (health Watch, reflection): anyone who reaches the port may open them,
 * each lives until its client ends it, and each holds tens of kilobytes,
 * so without a cap one client opening streams on connection after
 * connection would fill the heap. A stream past the cap is refused at
 * once (RESOURCE_EXHAUSTED `TOO_MANY_STREAMS`); its place is freed when
 * its answer ends, however it ends. Unary calls (Health/Check) are not
 * counted: the call gate bounds them.
 */
export function openStreamsInterceptor(max: number): Interceptor {
  let open = 0;
  return (next) => async (req) => {
    if (!req.stream) return next(req);
    if (open >= max) throw apiError("TOO_MANY_STREAMS", { limit: max });
    open++;
    let counted = true;
    const release = () => {
      if (counted) open--;
      counted = false;
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

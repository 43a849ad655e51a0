import { createContextKey, type Interceptor } from "@connectrpc/connect";
import { watchAbandoned } from "../store/abandon.js";

/** Work a call stopped waiting for (its deadline passed, its client left) that is still running. */
export class AbandonedWork {
  readonly #running = new Set<Promise<void>>();

  /** Counts `work` until it settles. */
  add(work: Promise<unknown>): void {
    const ended = work.then(
      () => undefined,
      () => undefined,
    );
    this.#running.add(ended);
    void ended.then(() => this.#running.delete(ended));
  }

  /**
   * Settles once every piece added so far has ended, or after `maxMs`
   * (work that never ends, a database that hangs, must not keep a place
   * for ever); undefined when nothing is running.
   */
  ended(maxMs: number): Promise<void> | undefined {
    if (this.#running.size === 0) return undefined;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, maxMs);
      timer.unref();
    });
    return Promise.race([Promise.all(this.#running).then(() => undefined), late]).finally(() => clearTimeout(timer));
  }
}

/** The call's AbandonedWork, where the server keeps its place at the call gate until that work ends. */
export const abandonedWorkKey = createContextKey<AbandonedWork | undefined>(undefined, { description: "work the call abandoned" });

/**
 * Adds to the call's AbandonedWork what its implementation's store calls
 * stop waiting for on the call's signal. Innermost of the interceptors, so
 * that its signal is the one the implementation is given.
 */
export function abandonedWorkInterceptor(): Interceptor {
  return (next) => (req) => {
    const work = req.contextValues.get(abandonedWorkKey);
    if (work !== undefined) watchAbandoned(req.signal, (w) => work.add(w));
    return next(req);
  };
}

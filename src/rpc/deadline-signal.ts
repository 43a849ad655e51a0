/** A signal bounded by a parent signal and a time limit, and how to release it. */
export interface DeadlineSignal {
  readonly signal: AbortSignal;
  /** Stops the timer and stops listening to the parent; call it when the work is done. */
  dispose(): void;
}

/**
 * A signal that aborts when `parent` does (with the parent's reason) or
 * after `timeoutMs` (with `onTimeout()`), whichever comes first, until
 * disposed.
 *
 * Why not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: that timer
 * cannot be cleared, so every call would leave its signal and timer alive
 * for the whole deadline after it has been answered, and Node keeps each
 * composite in its long-lived parent's list of dependants until the
 * collector runs. At thousands of calls a second and a 30 s deadline that
 * is hundreds of thousands of live timers: memory a stream of cheap
 * requests could grow at will. Here the timer and the listener end with
 * the call.
 */
export function deadlineSignal(parent: AbortSignal | undefined, timeoutMs: number, onTimeout: () => unknown): DeadlineSignal {
  const controller = new AbortController();
  if (parent?.aborted === true) {
    controller.abort(parent.reason);
    return { signal: controller.signal, dispose: () => undefined };
  }
  const onParentAbort = () => {
    clearTimeout(timer);
    controller.abort(parent!.reason);
  };
  const timer = setTimeout(() => {
    parent?.removeEventListener("abort", onParentAbort);
    controller.abort(onTimeout());
  }, timeoutMs);
  parent?.addEventListener("abort", onParentAbort, { once: true });
  return {
    signal: controller.signal,
    dispose: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParentAbort);
    },
  };
}

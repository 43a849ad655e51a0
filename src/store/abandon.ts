const watchers = new WeakMap<AbortSignal, (work: Promise<unknown>) => void>();

/**
 * Has `onAbandoned` told of each piece of work untilAborted stops waiting
 * for on `signal`. Work a call no longer waits for still holds what it
 * holds (a pooled connection, a place in the pool's queue, a row lock), so
 * the call's place at the call gate is kept until it ends: otherwise a
 * caller with deadlines shorter than its work could start work without
 * bound, each call giving its place back as soon as it was answered.
 */
export function watchAbandoned(signal: AbortSignal, onAbandoned: (work: Promise<unknown>) => void): void {
  watchers.set(signal, onAbandoned);
}

/**
 * The work's result, or the signal's reason as soon as it aborts (the
 * call's deadline, the client gone, the server stopping): the caller stops
 * waiting, and the work's result, when it comes, is dropped. What the work
 * holds (a pooled connection, a transaction) is its owner's to release
 * when it ends; a transaction abandoned this way is rolled back, never
 * committed (inTransaction).
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  if (signal.aborted) {
    work.catch(() => undefined);
    watchers.get(signal)?.(work);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      work.catch(() => undefined);
      watchers.get(signal)?.(work);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

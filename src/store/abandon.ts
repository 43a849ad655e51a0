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
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      work.catch(() => undefined);
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

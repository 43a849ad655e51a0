/** A reading shared by its callers (sharedReading). */
export interface SharedReading<T> {
  (): Promise<T>;
  /** Forgets the last reading: the next caller reads again. */
  reset(): void;
}

/**
 * A reading that many callers share: at most one read is in flight, and
 * its outcome, value or failure, is reused for `maxAgeMs`. Unauthenticated
 * callers (metrics scrapes, readiness probes) then cost one read per
 * interval however many of them there are, so that a flood of them cannot
 * take the database pool from the API's calls.
 */
export function sharedReading<T>(read: () => Promise<T>, maxAgeMs: number, now: () => number = Date.now): SharedReading<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  const get = (): Promise<T> => {
    const at = now();
    if (last === undefined || at - last.at > maxAgeMs) {
      const value = read();
      // Kept and handed out as it is; a caller that drops it must not leave an unhandled rejection.
      value.catch(() => undefined);
      last = { at, value };
    }
    return last.value;
  };
  return Object.assign(get, { reset: () => void (last = undefined) });
}

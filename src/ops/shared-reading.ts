/** A reading shared by its callers (sharedReading). */
export interface SharedReading<T> {
  (): Promise<T>;
  /** Forgets the last reading: the next caller reads again. */
  reset(): void;
}

/**
 * A reading that many callers share: at most one read is in flight, and
 * its outcome, value or failure, is reused for `maxAgeMs` after it came
 * (never, when negative: shared only while in flight). Unauthenticated
 * callers (metrics scrapes, readiness probes) then cost one read per
 * interval however many of them there are, so that a flood of them cannot
 * take the database pool from the API's calls.
 */
export function sharedReading<T>(read: () => Promise<T>, maxAgeMs: number, now: () => number = Date.now): SharedReading<T> {
  // A negative age: shared only while in flight, whatever the clock does.
  const stale = (settledAt: number) => maxAgeMs < 0 || now() - settledAt > maxAgeMs;
  // Its age counts from when it settled: a read still running (a database
  // that hangs) is shared however long it takes, never joined by another.
  let last: { settledAt: number | undefined; value: Promise<T> } | undefined;
  const get = (): Promise<T> => {
    if (last === undefined || (last.settledAt !== undefined && stale(last.settledAt))) {
      const reading: { settledAt: number | undefined; value: Promise<T> } = { settledAt: undefined, value: read() };
      const settled = () => void (reading.settledAt = now());
      // Also keeps a rejection nobody waits for from being unhandled.
      reading.value.then(settled, settled);
      last = reading;
    }
    return last.value;
  };
  return Object.assign(get, { reset: () => void (last = undefined) });
}

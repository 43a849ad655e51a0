/** The time source, injected so tests can pin "now". */
export interface Clock {
  now(): Date;
}

/** The system's wall clock. */
export const systemClock: Clock = { now: () => new Date() };

import { setMaxListeners } from "node:events";
import { type SharedReading, sharedReading } from "./shared-reading.js";

/** A dependency the service needs to serve: the database, the blob store. */
export interface Probe {
  readonly name: string;
  /** Fails when the dependency cannot serve; may name a condition that leaves it serving (reported as `ok (CONDITION)`). */
  check(): Promise<string | undefined | void>;
}

/** The outcome of a readiness check. */
export interface ReadinessReport {
  readonly ready: boolean;
  readonly checks: Readonly<Record<string, string>>;
}

/**
 * Whether the service can serve: every probe answered within the timeout,
 * and the service is not shutting down. Results are cached briefly so
 * frequent probes (load balancers, gRPC health Watch) cost one check per
 * interval, not one per caller.
 */
export class Readiness {
  readonly #probes: readonly Probe[];
  readonly #timeoutMs: number;
  readonly #report: SharedReading<ReadinessReport>;
  readonly #stopping = new AbortController();

  constructor(probes: readonly Probe[], options: { timeoutMs?: number; cacheMs?: number } = {}) {
    this.#probes = probes;
    this.#timeoutMs = options.timeoutMs ?? 2_000;
    this.#report = sharedReading(() => this.#run(), options.cacheMs ?? 1_000);
    // Each open health Watch listens to it: many is normal, not a leak.
    setMaxListeners(0, this.#stopping.signal);
  }

  /** From now on the service reports not ready (it is draining). */
  shutDown(): void {
    this.#report.reset();
    this.#stopping.abort();
  }

  /** Aborted once shutDown() has been called: what watches the status (health Watch) looks again at once. */
  get stopping(): AbortSignal {
    return this.#stopping.signal;
  }

  async #run(): Promise<ReadinessReport> {
    const checks: Record<string, string> = {};
    await Promise.all(
      this.#probes.map(async (probe) => {
        let timer: NodeJS.Timeout | undefined;
        try {
          const condition = await Promise.race([
            probe.check(),
            new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${this.#timeoutMs} ms`)), this.#timeoutMs))),
          ]);
          checks[probe.name] = typeof condition === "string" ? `ok (${condition})` : "ok";
        } catch (error) {
          // The reason's code only: /readyz is unauthenticated, so no host
          // names or messages.
          const e = error as { code?: unknown; cause?: { code?: unknown } };
          const code = e.code ?? e.cause?.code;
          checks[probe.name] = typeof code === "string" ? `unavailable (${code})` : "unavailable";
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    if (this.#stopping.signal.aborted) checks["server"] = "shutting down";
    return { ready: !this.#stopping.signal.aborted && Object.values(checks).every((c) => c.startsWith("ok")), checks };
  }

  /** The current report, at most cacheMs old. */
  check(): Promise<ReadinessReport> {
    return this.#report();
  }
}

// A closed-loop load generator: `concurrency` workers call as fast as they
// can (or at a fixed total rate), after a warm-up, for a fixed time, timing
// every call. Exact percentiles from the sorted latencies.

/** What one load run measured. */
export interface LoadResult {
  readonly requests: number;
  readonly errors: number;
  readonly seconds: number;
  readonly rps: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
  /** The first few error descriptions, to show what went wrong. */
  readonly samples: string[];
}

/** One call: resolves true on the expected answer, false (or a string saying why) otherwise. */
export type Call = (worker: number, n: number) => Promise<true | string>;

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `call` from `concurrency` workers for warmupMs (not measured) then durationMs. */
export async function closedLoop(options: { concurrency: number; warmupMs: number; durationMs: number; rate?: number; call: Call }): Promise<LoadResult> {
  const { concurrency, warmupMs, durationMs, rate, call } = options;
  let latencies = new Float64Array(1 << 16);
  let count = 0;
  let errors = 0;
  const samples: string[] = [];
  let measuring = false;
  let stop = false;
  let n = 0;
  // Fixed rate: a shared schedule of start times, so latency is measured
  // from when a request was due (no coordinated omission).
  const interval = rate === undefined ? 0 : 1000 / rate;
  let nextDue = 0;
  const worker = async (w: number) => {
    while (!stop) {
      let due = performance.now();
      if (rate !== undefined) {
        due = nextDue = Math.max(nextDue + interval, performance.now() - 50);
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        if (stop) return;
      }
      const start = rate === undefined ? performance.now() : due;
      let outcome: true | string;
      try {
        outcome = await call(w, n++);
      } catch (error) {
        outcome = error instanceof Error ? error.message : String(error);
      }
      const took = performance.now() - start;
      if (!measuring) continue;
      if (outcome !== true) {
        errors++;
        if (samples.length < 5) samples.push(outcome);
      }
      if (count === latencies.length) {
        const bigger = new Float64Array(latencies.length * 2);
        bigger.set(latencies);
        latencies = bigger;
      }
      latencies[count++] = took;
    }
  };
  nextDue = performance.now();
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w));
  await sleep(warmupMs);
  measuring = true;
  const started = performance.now();
  await sleep(durationMs);
  measuring = false;
  const seconds = (performance.now() - started) / 1000;
  stop = true;
  await Promise.all(workers);
  const sorted = latencies.slice(0, count).sort();
  return {
    requests: count,
    errors,
    seconds,
    rps: count / seconds,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]!,
    samples,
  };
}

/** Runs `calls` once each with at most `concurrency` in flight; for one-shot work like confirms. */
export async function runBatch(calls: Array<() => Promise<true | string>>, concurrency: number): Promise<LoadResult> {
  const latencies = new Float64Array(calls.length);
  let next = 0;
  let errors = 0;
  const samples: string[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < calls.length; i = next++) {
        const t = performance.now();
        let outcome: true | string;
        try {
          outcome = await calls[i]!();
        } catch (error) {
          outcome = error instanceof Error ? error.message : String(error);
        }
        latencies[i] = performance.now() - t;
        if (outcome !== true) {
          errors++;
          if (samples.length < 5) samples.push(outcome);
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const sorted = latencies.sort();
  return {
    requests: calls.length,
    errors,
    seconds,
    rps: calls.length / seconds,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    samples,
  };
}

/** The median of several runs' values. */
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

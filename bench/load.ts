// A closed-loop load generator: `concurrency` workers call as fast as they
// can (or at a fixed total rate), after a warm-up, for a fixed time, timing
// every call. Exact percentiles from the sorted latencies. The same loop run
// by h2load, when it is installed, for the reads.
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

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

/** A run's result from its latencies (sorted here) and its error count. */
function summarize(latencies: Float64Array, errors: number, seconds: number, samples: string[]): LoadResult {
  const sorted = latencies.sort();
  return {
    requests: sorted.length,
    errors,
    seconds,
    rps: sorted.length / seconds,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    samples,
  };
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
  return summarize(latencies.slice(0, count), errors, seconds, samples);
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
  return summarize(latencies, errors, seconds, samples);
}

/** The median of several runs' values. */
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/** What an h2load run loads: the URLs it cycles through, with one body for all (gRPC) or none (GET). */
export interface H2loadOptions {
  readonly urls: readonly string[];
  /** HTTP/1.1 keep-alive connections, one request in flight on each; otherwise one HTTP/2 connection. */
  readonly h1: boolean;
  readonly headers: Readonly<Record<string, string>>;
  /** A request body, sent with POST. */
  readonly body?: Uint8Array;
  /** The HTTP status every answer should have. */
  readonly expectStatus: number;
  readonly concurrency: number;
  readonly warmupMs: number;
  readonly durationMs: number;
}

/** Whether h2load (Debian's nghttp2-client) is installed. */
export function h2loadAvailable(): boolean {
  try {
    execFileSync("h2load", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/**
 * The same closed loop run by h2load, a load generator written in C: a
 * JavaScript generator (undici, and above all @grpc/grpc-js) takes a good
 * part of the two cores the service and the database need, which made the
 * generator, not the service, the bound of the gRPC figures. Latencies come
 * from h2load's per-request log, so the percentiles are exact, as in
 * closedLoop. h2load only sees HTTP statuses; a gRPC error travels in a
 * trailer, so the caller counts those from the service's own metrics.
 */
export async function h2load(options: H2loadOptions): Promise<LoadResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-h2load-"));
  try {
    const urls = path.join(dir, "urls");
    fs.writeFileSync(urls, `${options.urls.join("\n")}\n`);
    const logFile = path.join(dir, "log");
    const args = [
      "-i", urls,
      "-t", "1",
      ...(options.h1 ? ["--h1", "-c", String(options.concurrency), "-m", "1"] : ["-c", "1", "-m", String(options.concurrency)]),
      "-D", `${Math.round(options.durationMs)}ms`,
      `--warm-up-time=${Math.round(options.warmupMs)}ms`,
      `--log-file=${logFile}`,
      ...Object.entries(options.headers).flatMap(([k, v]) => ["-H", `${k}: ${v}`]),
    ];
    if (options.body !== undefined) {
      const bodyFile = path.join(dir, "body");
      fs.writeFileSync(bodyFile, options.body);
      args.push("-d", bodyFile);
    }
    const out = await new Promise<string>((resolve, reject) =>
      execFile("h2load", args, { maxBuffer: 1 << 24 }, (error, stdout, stderr) => (error ? reject(new Error(`h2load failed: ${stderr || stdout}`)) : resolve(stdout))),
    );
    // Lines: start (µs since the epoch), HTTP status, duration (µs). Over
    // HTTP/2 the few streams in flight when the warm-up ends are logged with
    // status 0; they are left out (a failed request is in h2load's summary).
    const lines = fs.readFileSync(logFile, "utf8").split("\n").filter((l) => l !== "" && l.split("\t")[1] !== "0");
    const latencies = new Float64Array(lines.length);
    const summary = /requests: .*/.exec(out)?.[0] ?? "";
    const failed = /(\d+) errored, (\d+) timeout/.exec(summary);
    let errors = failed === null ? 0 : Number(failed[1]) + Number(failed[2]);
    const samples: string[] = errors > 0 ? [summary] : [];
    lines.forEach((line, i) => {
      const [, status, micros] = line.split("\t").map(Number) as [number, number, number];
      latencies[i] = micros / 1000;
      if (status !== options.expectStatus) {
        errors++;
        if (samples.length < 5) samples.push(`HTTP ${status}`);
      }
    });
    // The log holds the measured period only, which lasts exactly -D.
    const seconds = options.durationMs / 1000;
    return summarize(latencies, errors, seconds, samples);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

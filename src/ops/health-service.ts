import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";
import { shownName } from "../rest/field-hint.js";
import {
  type Health,
  type HealthCheckRequest,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.js";
import type { Readiness } from "./readiness.js";

/**
 * Why a watch ended, as its status: the deadline (DEADLINE_EXCEEDED), the
 * server stopping (SHUTTING_DOWN, UNAVAILABLE) or the client going away.
 * Never OK: a watch that ends with OK tells its client that it completed.
 */
function endOf(signal: AbortSignal): ConnectError {
  return signal.reason instanceof ConnectError ? signal.reason : new ConnectError("the watch was cancelled", Code.Canceled);
}

/**
 * Resolves once `ms` have passed (never, when undefined) or one of
 * `signals` has aborted, leaving no listener behind: a watch lives for
 * hours, and would otherwise add one per interval.
 */
function wake(signals: readonly AbortSignal[], ms?: number): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signals.some((signal) => signal.aborted)) return resolve();
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(timer);
      for (const signal of signals) signal.removeEventListener("abort", done);
      resolve();
    };
    if (ms !== undefined) timer = setTimeout(done, ms);
    for (const signal of signals) signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * grpc.health.v1.Health: the server ("") and each served service are
 * SERVING when the service is ready (database and blob store reachable, not
 * shutting down) and NOT_SERVING otherwise. Watch sends the status at once
 * and again on every change (at once when shutdown begins); for a service
 * this server does not serve it sends SERVICE_UNKNOWN and keeps the call
 * open, as health.proto asks (clients reopen a watch that ends, so ending
 * it would make them loop).
 *
 * Once `closing` aborts (the server closes, after the drain), every Watch
 * sends NOT_SERVING if it has not yet and ends with its reason
 * (SHUTTING_DOWN): clients keep one per connection, which would otherwise
 * hold the process until its shutdown timeout.
 */
export class HealthService implements ServiceImpl<typeof Health> {
  readonly #readiness: Readiness;
  readonly #names: ReadonlySet<string>;
  readonly #watchIntervalMs: number;
  readonly #closing: AbortSignal;

  constructor(readiness: Readiness, services: readonly DescService[], options: { watchIntervalMs?: number; closing?: AbortSignal } = {}) {
    this.#readiness = readiness;
    this.#names = new Set(["", ...services.map((s) => s.typeName)]);
    this.#watchIntervalMs = options.watchIntervalMs ?? 1_000;
    this.#closing = options.closing ?? new AbortController().signal;
  }

  async #status(): Promise<Status> {
    return (await this.#readiness.check()).ready ? Status.SERVING : Status.NOT_SERVING;
  }

  async check(req: HealthCheckRequest) {
    if (!this.#names.has(req.service)) throw apiError("HEALTH_SERVICE_UNKNOWN", { service: shownName(req.service) });
    return { status: await this.#status() };
  }

  async *watch(req: HealthCheckRequest, ctx: HandlerContext) {
    const closing = this.#closing;
    if (!this.#names.has(req.service)) {
      yield { status: Status.SERVICE_UNKNOWN };
      // The served services are fixed at start-up: nothing more to send.
      await wake([ctx.signal, closing]);
      throw endOf(ctx.signal.aborted ? ctx.signal : closing);
    }
    const stopping = this.#readiness.stopping;
    let last: Status | undefined;
    while (!ctx.signal.aborted) {
      // The last word of a Watch the server ends is NOT_SERVING, whatever
      // the last check said: its client then stops sending here.
      let status = closing.aborted ? Status.NOT_SERVING : await this.#status();
      if (closing.aborted) status = Status.NOT_SERVING;
      if (status !== last) {
        yield { status };
        last = status;
      }
      if (closing.aborted) throw endOf(closing);
      // Woken by shutdown's start only until it has come (it stays aborted).
      await wake(stopping.aborted ? [ctx.signal, closing] : [ctx.signal, closing, stopping], this.#watchIntervalMs);
    }
    throw endOf(ctx.signal);
  }

  async list() {
    const status = await this.#status();
    return { statuses: Object.fromEntries([...this.#names].map((name) => [name, { status }])) };
  }
}

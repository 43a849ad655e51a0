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
 * grpc.health.v1.Health: the server ("") and each served service are
 * SERVING when the service is ready (database and blob store reachable, not
 * shutting down) and NOT_SERVING otherwise. Watch sends the status at once
 * and again on every change; for a service this server does not serve it
 * sends SERVICE_UNKNOWN and keeps the call open, as health.proto asks
 * (clients reopen a watch that ends, so ending it would make them loop).
 */
export class HealthService implements ServiceImpl<typeof Health> {
  readonly #readiness: Readiness;
  readonly #names: ReadonlySet<string>;
  readonly #watchIntervalMs: number;

  constructor(readiness: Readiness, services: readonly DescService[], options: { watchIntervalMs?: number } = {}) {
    this.#readiness = readiness;
    this.#names = new Set(["", ...services.map((s) => s.typeName)]);
    this.#watchIntervalMs = options.watchIntervalMs ?? 1_000;
  }

  async #status(): Promise<Status> {
    return (await this.#readiness.check()).ready ? Status.SERVING : Status.NOT_SERVING;
  }

  async check(req: HealthCheckRequest) {
    if (!this.#names.has(req.service)) throw apiError("HEALTH_SERVICE_UNKNOWN", { service: shownName(req.service) });
    return { status: await this.#status() };
  }

  async *watch(req: HealthCheckRequest, ctx: HandlerContext) {
    if (!this.#names.has(req.service)) {
      yield { status: Status.SERVICE_UNKNOWN };
      // The served services are fixed at start-up: nothing more to send.
      await new Promise<void>((resolve) => {
        if (ctx.signal.aborted) resolve();
        else ctx.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      throw endOf(ctx.signal);
    }
    let last: Status | undefined;
    while (!ctx.signal.aborted) {
      const status = await this.#status();
      if (status !== last) {
        yield { status };
        last = status;
      }
      // One listener per wait, removed when the wait ends either way: a
      // watch lives for hours, and would otherwise add one per interval.
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          ctx.signal.removeEventListener("abort", done);
          resolve();
        };
        const timer = setTimeout(done, this.#watchIntervalMs);
        ctx.signal.addEventListener("abort", done, { once: true });
      });
    }
    throw endOf(ctx.signal);
  }

  async list() {
    const status = await this.#status();
    return { statuses: Object.fromEntries([...this.#names].map((name) => [name, { status }])) };
  }
}

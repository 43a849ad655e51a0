import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import { reasonOf } from "../errors/api-error.js";
import type { Metrics } from "../ops/metrics.js";

/** What an RPC ended with, for the request's log line. */
export interface RpcOutcome {
  /** Set by the HTTP layer (rest, grpc, grpc-web, connect). */
  protocol?: string;
  rpc?: string;
  code?: string;
  reason?: string;
  /** Set once the call is counted, so that it is counted once, by whoever sees its end first. */
  recorded?: boolean;
}

/**
 * A per-request slot the HTTP layer creates and the interceptor fills, so
 * the one log line per request can say which RPC ran and how it ended
 * (gRPC answers HTTP 200 whatever its status).
 */
export const rpcOutcomeKey = createContextKey<RpcOutcome | undefined>(undefined, { description: "rpc outcome" });

/** Connect's code names in snake_case ("ok", "not_found", "unavailable"), as gRPC documents them. */
export function codeName(code: Code | 0): string {
  return code === 0 ? "ok" : Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/**
 * Notes how a call ended that no interceptor saw (refused before they ran:
 * a body that does not decode, a request Connect could not answer), in the
 * request's log outcome; a call the interceptors saw has its outcome noted
 * already, and keeps it.
 */
export function noteRefusal(outcome: RpcOutcome, error: ConnectError): void {
  if (outcome.rpc !== undefined) return;
  outcome.code = codeName(error.code);
  const reason = reasonOf(error);
  if (reason !== undefined) outcome.reason = reason;
}

/** One finished RPC, as metrics and the request log record it. */
export interface RpcRecord {
  readonly rpc: string;
  readonly protocol: string;
  readonly code: string;
  readonly reason?: string | undefined;
  readonly seconds: number;
}

/**
 * Counts and times one RPC and fills its log outcome. The interceptor
 * records every call it sees; the HTTP layer records, through this same
 * function, a call refused before any interceptor ran (a body past the
 * limits, a message that does not decode).
 */
export function recordRpc(metrics: Metrics, outcome: RpcOutcome | undefined, r: RpcRecord): void {
  if (outcome?.recorded === true) return;
  if (outcome !== undefined) outcome.recorded = true;
  metrics.recordRpc(r.rpc, r.protocol, r.code, r.seconds);
  if (r.reason === "STALE_BASE") metrics.staleBase.inc({ rpc: r.rpc });
  if (outcome !== undefined) Object.assign(outcome, { protocol: r.protocol, rpc: r.rpc, code: r.code, ...(r.reason === undefined ? {} : { reason: r.reason }) });
}

/**
 * The outermost interceptor: times every RPC, counts it by protocol and
 * status code, counts STALE_BASE conflicts, and records the outcome for the
 * request log. Outside the error interceptor, so it sees the catalog error
 * the client gets. A streaming RPC is recorded when its stream ends (its
 * error, or canceled when its reader stopped early), not when it starts.
 */
export function observeInterceptor(metrics: Metrics): Interceptor {
  return (next) => async (req) => {
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const start = process.hrtime.bigint();
    const outcome = req.contextValues.get(rpcOutcomeKey);
    // Seen by an interceptor: the HTTP layer, should the response end
    // before the call does (a client gone mid-stream), leaves it to this.
    if (outcome !== undefined) outcome.rpc = rpc;
    let recorded = false;
    const record = (error: unknown) => {
      if (recorded) return;
      recorded = true;
      const connectError = error === undefined ? undefined : ConnectError.from(error);
      recordRpc(metrics, outcome, {
        rpc,
        protocol: outcome?.protocol ?? "connect",
        code: connectError === undefined ? "ok" : codeName(connectError.code),
        reason: connectError === undefined ? undefined : reasonOf(connectError),
        seconds: Number(process.hrtime.bigint() - start) / 1e9,
      });
    };
    let res;
    try {
      res = await next(req);
    } catch (error) {
      record(error);
      throw error;
    }
    if (!res.stream) {
      record(undefined);
      return res;
    }
    const messages = res.message;
    // A reader that stops (a client that resets its stream) before it first
    // asks for a message, or while the stream waits at a yield for it to
    // ask for the next, may never come back: neither next() nor return()
    // comes, and the finally below never runs. The call's signal says it
    // ended then. While a message is being made, the stream's own end
    // (its error, with its reason) comes, and is what is recorded.
    let pulling = false;
    const stopped = () => {
      if (!pulling) record(req.signal.reason instanceof ConnectError ? req.signal.reason : new ConnectError("the stream's reader stopped", Code.Canceled));
    };
    req.signal.addEventListener("abort", stopped, { once: true });
    return {
      ...res,
      message: (async function* () {
        let ended: { error: unknown } | undefined;
        try {
          pulling = true;
          for await (const message of messages) {
            pulling = false;
            if (req.signal.aborted) stopped();
            yield message;
            pulling = true;
          }
          ended = { error: undefined };
        } catch (error) {
          ended = { error };
          throw error;
        } finally {
          pulling = false;
          req.signal.removeEventListener("abort", stopped);
          record(ended === undefined ? new ConnectError("the stream's reader stopped", Code.Canceled) : ended.error);
        }
      })(),
    };
  };
}

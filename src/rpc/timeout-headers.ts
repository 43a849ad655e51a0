import { apiError } from "../errors/api-error.js";

/** The longest delay Node's timers hold (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
export const maxTimerMs = 2 ** 31 - 1;

const grpcUnitMs: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 };

/** A `grpc-timeout` value in milliseconds (PROTOCOL-HTTP2.md: at most 8 digits and a unit), or undefined when it is not one. */
function grpcTimeoutMs(value: string): number | undefined {
  const parsed = /^(\d{1,8})([HMSmun])$/.exec(value);
  return parsed === null ? undefined : Number(parsed[1]) * grpcUnitMs[parsed[2]!]!;
}

/**
 * Drops a client's deadline too long for a timer (gRPC `grpc-timeout`,
 * Connect `connect-timeout-ms`: both protocols allow years), which Connect
 * would otherwise hand to a timer that fires at once, failing every call
 * that takes a millisecond and ending every watch after its first message,
 * retried in a loop. Without it the call is what it would be without a
 * deadline: a unary call keeps the server's own, a watch runs until its
 * client's clock ends it. Malformed values are left for Connect to refuse.
 */
export function dropUntimeableDeadlines(header: Headers): void {
  const grpcTimeout = header.get("grpc-timeout");
  if (grpcTimeout !== null && (grpcTimeoutMs(grpcTimeout) ?? 0) > maxTimerMs) header.delete("grpc-timeout");
  const connectTimeout = header.get("connect-timeout-ms");
  if (connectTimeout !== null && /^\d{1,10}$/.test(connectTimeout) && Number(connectTimeout) > maxTimerMs) header.delete("connect-timeout-ms");
}

/**
 * The deadline a REST call's client set with `Grpc-Timeout`, as
 * grpc-gateway reads it (the gRPC grammar: `5S`, `250m`), in milliseconds;
 * undefined without one, or with one too long for a timer (as on gRPC:
 * taken as none). A malformed value is refused, as grpc-gateway refuses it.
 */
export function restTimeoutMs(header: Headers): number | undefined {
  const value = header.get("grpc-timeout");
  if (value === null) return undefined;
  const ms = grpcTimeoutMs(value);
  if (ms === undefined) {
    throw apiError("INVALID_ARGUMENT", { field: "Grpc-Timeout header", problem: `"${value}" is not a timeout: at most 8 digits and a unit, H, M, S, m (ms), u (µs) or n (ns), e.g. 5S or 250m` });
  }
  return ms > maxTimerMs ? undefined : ms;
}

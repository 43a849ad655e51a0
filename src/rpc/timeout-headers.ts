import { apiError } from "../errors/api-error.js";

/** The longest delay Node's timers hold (2^31 - 1 ms, about 24.8 days); a longer one fires at once. */
export const maxTimerMs = 2 ** 31 - 1;

const grpcUnitMs: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 };

/** A `grpc-timeout` value in milliseconds (PROTOCOL-HTTP2.md: at most 8 digits and a unit), or undefined when it is not one. */
function grpcTimeoutMs(value: string): number | undefined {
  const parsed = /^(\d{1,8})([HMSmun])$/.exec(value);
  return parsed === null ? undefined : Number(parsed[1]) * grpcUnitMs[parsed[2]!]!;
}

/** A `connect-timeout-ms` value in milliseconds (the Connect protocol: at most 10 digits), or undefined when it is not one. */
function connectTimeoutMs(value: string): number | undefined {
  return /^\d{1,10}$/.test(value) ? Number(value) : undefined;
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
  if (connectTimeout !== null && (connectTimeoutMs(connectTimeout) ?? 0) > maxTimerMs) header.delete("connect-timeout-ms");
}

/** A header a client's deadline travels in. */
export type DeadlineHeader = "grpc-timeout" | "connect-timeout-ms";

/**
 * The header a call's deadline travels in, by its protocol: `grpc-timeout`
 * for gRPC and gRPC-Web (PROTOCOL-HTTP2.md, PROTOCOL-WEB.md), and for REST
 * as grpc-gateway reads it; `connect-timeout-ms` for Connect (any other
 * call of an RPC path). Only that one counts: another protocol's header on
 * a call is not its client's deadline, and Connect ignores it too.
 */
export function deadlineHeader(contentType: string | undefined, rpcPath: boolean): DeadlineHeader {
  if ((contentType ?? "").toLowerCase().startsWith("application/grpc")) return "grpc-timeout";
  return rpcPath ? "connect-timeout-ms" : "grpc-timeout";
}

/**
 * The deadline a call's client set, in milliseconds, from the value of its
 * protocol's header (deadlineHeader); undefined without a well-formed one,
 * or with one too long for a timer (no deadline).
 */
export function clientTimeoutMs(header: DeadlineHeader, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = header === "grpc-timeout" ? grpcTimeoutMs(value) : connectTimeoutMs(value);
  return ms === undefined || ms > maxTimerMs ? undefined : ms;
}

/**
 * Takes the time a call already spent here (waiting for its place at the
 * call gate, authenticating, reading its body) off its client's deadline,
 * which Connect counts only from when its handler starts: the call then
 * ends when its client's deadline does, not that much later, and a write
 * whose deadline passed while it waited is never made. Malformed values
 * are left for Connect to refuse.
 */
export function spendDeadline(header: Headers, elapsedMs: number): void {
  const grpcTimeout = header.get("grpc-timeout");
  const grpcMs = grpcTimeout === null ? undefined : grpcTimeoutMs(grpcTimeout);
  if (grpcMs !== undefined) {
    const left = Math.max(0, Math.floor(grpcMs - elapsedMs));
    // At most 8 digits: whole seconds past 99,999,999 ms.
    header.set("grpc-timeout", left <= 99_999_999 ? `${left}m` : `${Math.floor(left / 1000)}S`);
  }
  const connectTimeout = header.get("connect-timeout-ms");
  const connectMs = connectTimeout === null ? undefined : connectTimeoutMs(connectTimeout);
  if (connectMs !== undefined) header.set("connect-timeout-ms", String(Math.max(0, Math.floor(connectMs - elapsedMs))));
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

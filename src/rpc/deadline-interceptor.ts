import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";
import { deadlineSignal } from "./deadline-signal.js";

/**
 * The error a call's abort signal stands for: its deadline, the server
 * stopping, or the client gone. Also what a stream ends with when its
 * signal aborts.
 */
export function abortError(reason: unknown): ConnectError {
  if (reason instanceof ConnectError) {
    return reason.code === Code.DeadlineExceeded ? apiError("DEADLINE_EXCEEDED", {}, { cause: reason }) : reason;
  }
  return new ConnectError("the client went away", Code.Canceled, undefined, undefined, reason);
}

/**
 * Holds every unary call to its deadline: the client's (gRPC `grpc-timeout`,
 * Connect `connect-timeout-ms`, which Connect turns into the call's signal)
 * or, shorter, the server's own `defaultDeadlineMs`, which is also the only
 * deadline of a REST call. The handler gets a signal that aborts at the
 * deadline, and hands it to every database and blob call; and the call is
 * answered DEADLINE_EXCEEDED at the deadline even if some dependency does
 * not stop in time, so a hung dependency never holds a caller past it.
 * Streaming calls (watches) keep only their client's deadline.
 */
export function deadlineInterceptor(defaultDeadlineMs: number): Interceptor {
  return (next) => (req) => {
    if (req.stream) return next(req);
    const deadline = deadlineSignal(req.signal, defaultDeadlineMs, () => apiError("DEADLINE_EXCEEDED", {}));
    const { signal } = deadline;
    if (signal.aborted) return Promise.reject(abortError(signal.reason));
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(abortError(signal.reason));
      signal.addEventListener("abort", onAbort, { once: true });
      next({ ...req, signal })
        .then(resolve, reject)
        .finally(() => {
          signal.removeEventListener("abort", onAbort);
          deadline.dispose();
        });
    });
  };
}

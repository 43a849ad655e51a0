import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import { BlobStoreUnavailableError } from "../blob/blob-store.js";
import { apiError, reasonOf } from "../errors/api-error.js";
import { bearerChallenge } from "../errors/bearer-challenge.js";
import { classifyDbError, CommitOutcomeUnknownError } from "../store/db-errors.js";

/** The part of a pino logger the interceptor uses. */
export interface ErrorLogger {
  error(obj: object, msg: string): void;
}

/**
 * The logger of the request a call came in on, so that the cause logged
 * for a 5xx carries the reqId the client's answer names (x-request-id);
 * without it, the process's logger, and a cause no one can match to its call.
 */
export const requestLogKey = createContextKey<ErrorLogger | undefined>(undefined, { description: "request logger" });

/**
 * Turns any error into a catalog error before it leaves the service, so no
 * protocol ever sends a stack, an SQL message or a host name: outages become
 * UNAVAILABLE with a retry hint, lock conflicts DATABASE_BUSY, and anything
 * unexpected is logged with its cause and answered INTERNAL.
 */
export function toCatalogError(error: unknown, log: ErrorLogger, rpc: string): ConnectError {
  if (error instanceof ConnectError) {
    if (reasonOf(error) !== undefined) return error;
    // Connect's own protocol errors (bad encoding, deadline, cancel) are
    // already client-facing; an Internal or Unknown one wraps a bug.
    if (error.code !== Code.Internal && error.code !== Code.Unknown) return error;
  }
  if (error instanceof BlobStoreUnavailableError) {
    log.error({ err: error, rpc }, "blob store unavailable");
    return apiError("BLOB_STORE_UNAVAILABLE", {}, { cause: error });
  }
  if (error instanceof CommitOutcomeUnknownError) {
    log.error({ err: error, rpc }, "database connection lost at commit");
    return apiError("COMMIT_OUTCOME_UNKNOWN", {}, { cause: error });
  }
  const kind = classifyDbError(error);
  if (kind === "unavailable" || kind === "timeout") {
    log.error({ err: error, rpc }, "database unavailable");
    return apiError("DATABASE_UNAVAILABLE", {}, { cause: error });
  }
  if (kind === "busy") {
    log.error({ err: error, rpc }, "database lock conflict");
    return apiError("DATABASE_BUSY", {}, { cause: error });
  }
  log.error({ err: error, rpc }, "internal error");
  return apiError("INTERNAL", {}, { cause: error });
}

/** A catalog error as it leaves: a 401 carries its challenge (bearerChallenge) on every protocol. */
function challenged(error: ConnectError): ConnectError {
  const challenge = bearerChallenge(error);
  if (challenge !== undefined) error.metadata.set("www-authenticate", challenge);
  return error;
}

/**
 * Every error leaves through toCatalogError, including one that ends a
 * stream after it began. It runs inside the observe interceptor, so that
 * the metrics and the log see the catalog error the client gets.
 */
export function errorInterceptor(log: ErrorLogger): Interceptor {
  return (next) => async (req) => {
    // A stream's request messages are read through here: what fails while
    // reading them (a frame flagged compressed without an encoding, a
    // message that does not decode) is the client's, answered with Connect's
    // own status and message as on unary calls, and not a bug to log.
    let fromClient: WeakSet<object> | undefined;
    if (req.stream) {
      const seen = (fromClient = new WeakSet<object>());
      const input = req.message;
      req = {
        ...req,
        message: (async function* () {
          try {
            yield* input;
          } catch (error) {
            if (error instanceof ConnectError) seen.add(error);
            throw error;
          }
        })(),
      };
    }
    const callLog = req.contextValues.get(requestLogKey) ?? log;
    const answer = (error: unknown) => (error instanceof ConnectError && fromClient?.has(error) === true ? error : challenged(toCatalogError(error, callLog, req.method.name)));
    let res;
    try {
      res = await next(req);
    } catch (error) {
      throw answer(error);
    }
    if (!res.stream) return res;
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
        } catch (error) {
          throw answer(error);
        }
      })(),
    };
  };
}

import { createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";

/** Who is calling: what authentication established about the request. */
export interface Caller {
  /** Stable user id; becomes a version's published_by. */
  readonly id: string;
  readonly roles: readonly string[];
  readonly orgs: readonly string[];
  /**
   * When the credential stops being accepted (epoch ms, clock skew
   * included); undefined when it never does. A call checks its credential
   * once, at its start; a stream that outlives it (a watch) is ended then.
   */
  readonly expiresAt?: number;
}

/**
 * Turns a request's Authorization header (HTTP) or authorization metadata
 * (gRPC) into a Caller, or throws the catalog's UNAUTHENTICATED errors for a
 * missing or bad credential. It needs nothing but that one header, so the
 * HTTP layer decides it before any request body is read.
 */
export interface Authenticator {
  authenticate(authorization: string | null): Promise<Caller>;
  /**
   * The caller of a credential verified moments ago, answered at once, or
   * undefined when it must go through authenticate(). Lets the HTTP layer
   * skip the deadline it puts around a verification that could wait on the
   * network (a JWKS fetch) when nothing will wait.
   */
  known?(authorization: string | null): Caller | undefined;
}

/** What authenticating a request's headers gave: a caller, or the error to answer. */
export type AuthResult = { readonly caller: Caller } | { readonly error: unknown };

/**
 * The result of authenticating a request from its headers, set by the HTTP
 * layer before the body is read; the auth interceptor answers from it
 * rather than authenticating again.
 */
export const authResultKey = createContextKey<AuthResult | undefined>(undefined, { description: "auth result" });

/** The context value the auth interceptor fills for every RPC. */
export const callerKey = createContextKey<Caller | undefined>(undefined, { description: "caller" });

/**
 * Authenticates one Authorization header, keeping a refusal as a value
 * rather than a rejection. With a signal, gives up when it aborts (the
 * call's deadline, the server stopping), with its reason as the refusal:
 * a signing-key fetch that hangs must not hold the caller past either.
 */
export async function authenticateHeader(authenticator: Authenticator, authorization: string | null, signal?: AbortSignal): Promise<AuthResult> {
  try {
    const authenticating = authenticator.authenticate(authorization);
    if (signal === undefined) return { caller: await authenticating };
    if (signal.aborted) return { error: signal.reason };
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return { caller: await Promise.race([authenticating, aborted]) };
    } finally {
      signal.removeEventListener("abort", onAbort!);
      authenticating.catch(() => undefined);
    }
  } catch (error) {
    return { error };
  }
}

/**
 * The one seam where a call's caller is established: an interceptor, so
 * gRPC, gRPC-Web, Connect and REST identify callers the same way before any
 * handler runs. The HTTP layer has usually authenticated the headers
 * already (before reading the body); this uses that result, and
 * authenticates itself only when nobody did.
 */
export function authInterceptor(authenticator: Authenticator): Interceptor {
  return (next) => async (req) => {
    const result = req.contextValues.get(authResultKey) ?? (await authenticateHeader(authenticator, req.header.get("authorization")));
    if ("error" in result) throw result.error;
    req.contextValues.set(callerKey, result.caller);
    return next(req);
  };
}

/** The caller of the RPC, as the auth interceptor left it. */
export function callerOf(ctx: HandlerContext): Caller | undefined {
  return ctx.values.get(callerKey);
}

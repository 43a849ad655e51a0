import { createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";

/** Who is calling: what authentication established about the request. */
export interface Caller {
  /** Stable user id; becomes a version's published_by. */
  readonly id: string;
  readonly roles: readonly string[];
  readonly orgs: readonly string[];
}

/**
 * Turns request headers into a Caller, or throws the catalog's
 * UNAUTHENTICATED errors for a missing or bad credential.
 */
export interface Authenticator {
  authenticate(headers: Headers): Promise<Caller>;
}

/** The context value the auth interceptor fills for every RPC. */
export const callerKey = createContextKey<Caller | undefined>(undefined, { description: "caller" });

/**
 * The one seam where authentication happens: an interceptor, so gRPC,
 * Connect and the REST gateway (which runs the same interceptors) all
 * identify callers the same way before any handler runs.
 */
export function authInterceptor(authenticator: Authenticator): Interceptor {
  return (next) => async (req) => {
    req.contextValues.set(callerKey, await authenticator.authenticate(req.header));
    return next(req);
  };
}

/** The caller of the RPC, as the auth interceptor left it. */
export function callerOf(ctx: HandlerContext): Caller | undefined {
  return ctx.values.get(callerKey);
}

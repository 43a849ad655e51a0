import type { HandlerContext } from "@connectrpc/connect";
import { type Caller, callerOf } from "../auth/caller.js";
import type { Decision } from "../auth/policy.js";
import { apiError } from "../errors/api-error.js";

/** The authenticated caller of an RPC; the auth interceptor has already refused anonymous calls. */
export function requireCaller(ctx: HandlerContext): Caller {
  const caller = callerOf(ctx);
  if (caller === undefined) throw apiError("AUTH_REQUIRED", {});
  return caller;
}

/**
 * Turns a refusing access decision into its error: NOT_FOUND exactly as for
 * an entity that does not exist (a caller without access learns nothing),
 * or PERMISSION_DENIED for a caller who may read the entity. Returns the
 * decision when it allows.
 */
export function enforce(decision: Decision, entityId: string, caller: Caller): Decision {
  if (decision === "hidden") throw apiError("ENTITY_NOT_FOUND", { entityId });
  if (decision === "forbidden") {
    throw apiError("PERMISSION_DENIED", {
      entityId,
      problem: caller.roles.includes("publisher")
        ? "only its publishers may change it or manage its access; ask one of them to add you as a publisher."
        : "changing it needs the publisher role, and being one of its publishers.",
    });
  }
  return decision;
}

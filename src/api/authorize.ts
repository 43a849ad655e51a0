import type { ConnectError, HandlerContext } from "@connectrpc/connect";
import { type Caller, callerOf } from "../auth/caller.js";
import { type AccessFacts, type Decision, decideRead, decideWrite, publisherRole } from "../auth/policy.js";
import { apiError } from "../errors/api-error.js";
import type { ChangeAuthorization } from "../store/access-store.js";

/** The authenticated caller of an RPC; the auth interceptor has already refused anonymous calls. */
export function requireCaller(ctx: HandlerContext): Caller {
  const caller = callerOf(ctx);
  if (caller === undefined) throw apiError("AUTH_REQUIRED", {});
  return caller;
}

/**
 * The error of a refusing access decision: NOT_FOUND exactly as for an
 * entity that does not exist (a caller without access learns nothing), or
 * PERMISSION_DENIED for a caller who may read the entity. A push refused
 * to a caller with the publisher role is the one exception: such a caller
 * would have claimed a free id, so the id is taken, and the message says
 * so (README: upload-url tells a publisher whether an id is taken). A
 * push by a caller without the role (an admin is never refused) is told
 * that it needs it.
 */
export function refusal(decision: "hidden" | "forbidden", entityId: string, caller: Caller, push = false): ConnectError {
  if (decision === "hidden") {
    if (!push) return apiError("ENTITY_NOT_FOUND", { entityId });
    // The role is the caller's own to know about; whether the entity exists stays hidden.
    if (caller.roles.includes(publisherRole)) return apiError("ENTITY_NOT_FOUND", { entityId, taken: true });
    return apiError("ENTITY_NOT_FOUND", { entityId, pushWithoutRole: true });
  }
  return apiError("PERMISSION_DENIED", {
    entityId,
    problem: caller.roles.includes(publisherRole)
      ? "only its publishers may change it, or see and manage its access; ask one of them to add you as a publisher."
      : "changing it, or seeing and managing its access, needs the publisher role (from whoever issues your tokens) and being one of its publishers (ask one of them to add you).",
  });
}

/** Throws the error of a refusing access decision; returns the decision when it allows. */
export function enforce(decision: Decision, entityId: string, caller: Caller): Decision {
  if (decision === "hidden" || decision === "forbidden") throw refusal(decision, entityId, caller);
  return decision;
}

/**
 * Refuses a read from what its one query found: a caller who may not read
 * the entity, and an entity that does not exist, get the same
 * ENTITY_NOT_FOUND, decided in that order so that neither answer tells
 * the two apart. Returns what was found, which is then an entity.
 */
export function enforceRead<T extends { readonly kind: string; readonly facts: AccessFacts }>(
  found: T,
  entityId: string,
  caller: Caller,
): Exclude<T, { readonly kind: "entity-missing" }> {
  enforce(decideRead(caller, found.facts), entityId, caller);
  if (found.kind === "entity-missing") throw apiError("ENTITY_NOT_FOUND", { entityId });
  return found as Exclude<T, { readonly kind: "entity-missing" }>;
}

/**
 * The caller's right to change an entity (decideWrite), for the store to
 * decide again under the entity's lock, where it counts.
 */
export function writeAuthorization(caller: Caller): ChangeAuthorization {
  return { caller, decide: (facts) => decideWrite(caller, facts) };
}

import type { Caller } from "./caller.js";

/** The role that may push, activate and delete (spec 5's publisher role). */
export const publisherRole = "publisher";
/** The role of internal services that manage access: everything, on every entity. */
export const adminRole = "admin";

/** What the store knows about one caller's relation to one entity. */
export interface AccessFacts {
  /** The caller is one of the entity's publishers. */
  readonly isPublisher: boolean;
  /** The entity has any publisher at all (else its first push claims it). */
  readonly hasPublishers: boolean;
  /** The entity is shared with the caller. */
  readonly isShared: boolean;
  /** The entity is in the store of an organization the caller belongs to. */
  readonly inOrgStore: boolean;
  /** The entity is in the public store. */
  readonly isPublic: boolean;
}

/** Facts of an entity that does not exist. */
export const noAccess: AccessFacts = Object.freeze({
  isPublisher: false,
  hasPublishers: false,
  isShared: false,
  inOrgStore: false,
  isPublic: false,
});

/**
 * An access decision: allow; allow and record the caller as the entity's
 * first publisher (claim); refuse as if the entity did not exist (hidden:
 * NOT_FOUND, so a caller without access learns nothing); or refuse a caller
 * who may read but not do this (forbidden: PERMISSION_DENIED).
 */
export type Decision = "allow" | "claim" | "hidden" | "forbidden";

const has = (caller: Caller, role: string) => caller.roles.includes(role);

/** Read access through any of spec 5's paths, or admin. */
export function decideRead(caller: Caller, facts: AccessFacts): Decision {
  if (has(caller, adminRole)) return "allow";
  return facts.isPublisher || facts.isShared || facts.inOrgStore || facts.isPublic ? "allow" : "hidden";
}

/** Writes (activate, delete, manage access): the publisher role and being a publisher of the entity, or admin. */
export function decideWrite(caller: Caller, facts: AccessFacts): Decision {
  if (has(caller, adminRole)) return "allow";
  if (facts.isPublisher && has(caller, publisherRole)) return "allow";
  return decideRead(caller, facts) === "allow" ? "forbidden" : "hidden";
}

/**
 * Pushes: like writes, except that an unclaimed entity (no publisher and no
 * version: one that does not exist yet) is claimed by the first caller who
 * may push to it, with the publisher role or as an admin: that caller
 * becomes its first publisher, so no entity ever has versions and nobody
 * to own them. One that somehow has versions but no publisher is never
 * claimable: only an admin may push to it (and add its publishers).
 */
export function decidePushAccess(caller: Caller, facts: AccessFacts, hasVersions: boolean): Decision {
  if (!facts.hasPublishers && !hasVersions && (has(caller, publisherRole) || has(caller, adminRole))) return "claim";
  return decideWrite(caller, facts);
}

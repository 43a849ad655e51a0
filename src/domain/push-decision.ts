import type { Decision } from "../auth/policy.js";

/** The least a push decision needs to know of a version. */
export interface DecidedVersion {
  readonly id: string;
  readonly isActive: boolean;
  /** What makes a push this version: a retried confirm must name the same. */
  readonly version: string;
  readonly sourceHash: string;
  readonly fileSizeBytes: number;
}

/** Everything a push is decided from, as read (under the entity's lock, for a confirm that writes). */
export interface PushFacts<V extends DecidedVersion> {
  /** The caller's access to the entity, as the policy decided it from the access facts (with a first push's claim). */
  readonly access: Decision;
  /** The entity's tip id; undefined when it has no versions. */
  readonly tipVersionId: string | undefined;
  /** The newest version with the pushed source hash. */
  readonly duplicate: V | undefined;
  /** The version that already has the pushed version string. */
  readonly versionTaken: V | undefined;
  /** Confirm only: the version this upload already produced (an earlier confirm of it succeeded). */
  readonly uploadVersion: V | undefined;
  /** Confirm only: whether the upload was issued for this entity and may still be confirmed. */
  readonly uploadIssued: boolean;
  /** Confirm only: the existing version an earlier confirm of this upload was answered with and made active (deduplication). */
  readonly uploadActivatedId: string | undefined;
}

/** What the caller asked for. */
export interface PushIntent {
  /** Which endpoint: GetUploadUrl only asks; ConfirmUpload also names an upload and may activate. */
  readonly step: "upload-url" | "confirm";
  /** The base the client built on; "" when it named none. */
  readonly baseVersionId: string;
  readonly force: boolean;
  /** Confirm only: make the version (created or existing) active. */
  readonly setAsActive: boolean;
  /** The push itself: a retried confirm is one that names the same as the confirm that used its upload. */
  readonly version: string;
  readonly sourceHash: string;
  /** Confirm only. */
  readonly fileSizeBytes?: number | undefined;
}

/** How a push is answered; only "create" and an "existing" that activates write anything. */
export type PushOutcome<V extends DecidedVersion> =
  /** Refused for access: NOT_FOUND (hidden) or PERMISSION_DENIED (forbidden). */
  | { readonly kind: "refused"; readonly decision: "hidden" | "forbidden" }
  /**
   * Answered with a version that exists: the one this upload already
   * produced (a retried confirm), or the newest with the same source
   * (deduplication). `activate`: it must become active (set_as_active), and
   * is not yet; never for a retry.
   */
  | { readonly kind: "existing"; readonly version: V; readonly reason: "retry" | "duplicate"; readonly activate: boolean }
  /** The base is not the tip (or missing once the entity has versions): STALE_BASE. */
  | { readonly kind: "stale" }
  /** The entity already has the version string. */
  | { readonly kind: "version-taken"; readonly existing: V }
  /** Confirm only: the upload is unknown here, swept, or its version was deleted. */
  | { readonly kind: "upload-missing" }
  /** Confirm only: the upload already produced `existing`, and this confirm names another push (its source hash, version string or size differ). */
  | { readonly kind: "upload-used"; readonly existing: V }
  /** A new version: record it; `claim` makes the caller the entity's first publisher. */
  | { readonly kind: "create"; readonly claim: boolean };

/**
 * Decides a push (GetUploadUrl or ConfirmUpload) from what is known, in the
 * one order the service applies everywhere:
 *
 * 1. access: a caller without it learns nothing more;
 * 2. a confirm of an upload that already produced a version answers that
 *    version, whatever force and the base say, and changes nothing:
 *    retrying a confirm is always safe. A retry is the same push; one of
 *    the same source without force (another version string or size) is
 *    answered as deduplication answers any upload of that source, the
 *    newest version of it (spec 4.2 rule 2: re-confirming the same source
 *    hash is 200, not 409), unless it asks to activate that version,
 *    which a used upload cannot record; any other (another source hash,
 *    or force) is refused (upload-used), since its upload holds the other
 *    push's package;
 * 3. deduplication: the same source answers its newest version unless
 *    `force` (spec 4.2 rule 2: before push protection);
 * 4. push protection: the base must be the tip (spec 4.7; `force` never
 *    bypasses it);
 * 5. the version string is free;
 * 6. a confirm's upload is still there to confirm.
 *
 * A duplicate answered to a confirm with `set_as_active` becomes active
 * (the same rights as SetActiveVersion: those of a push). A retry does not
 * activate: the confirm that produced the version activated it in the same
 * transaction if it asked to, and activating it again would silently undo
 * an activation made since (a retry arrives after its answer was lost,
 * possibly long after). Nor does the retry of a confirm answered with a
 * duplicate it made active: the upload records that it did and is used up
 * by it, so such a confirm needs its upload issued (else upload-missing,
 * though the duplicate is found first), and its retry activates nothing,
 * even a newer duplicate, and creates nothing once that duplicate is
 * deleted (the upload is no longer issued). Pure, so
 * the pre-check, the locked transaction and the grouped transaction all
 * decide with it, and the tests can walk its whole table.
 */
export function decidePush<V extends DecidedVersion>(facts: PushFacts<V>, intent: PushIntent): PushOutcome<V> {
  if (facts.access === "hidden" || facts.access === "forbidden") return { kind: "refused", decision: facts.access };
  const confirm = intent.step === "confirm";
  const existing = (version: V, reason: "retry" | "duplicate"): PushOutcome<V> => {
    // An upload activates once: a confirm of one that already made a
    // duplicate active is its retry, whatever duplicate it finds now.
    const activate = reason === "duplicate" && confirm && intent.setAsActive && !version.isActive && facts.uploadActivatedId === undefined;
    // The upload records the activation, so that a retry does not repeat it:
    // a confirm of an upload that is not there has nothing to record it on.
    if (activate && !facts.uploadIssued) return { kind: "upload-missing" };
    return { kind: "existing", version, reason, activate };
  };
  if (confirm && facts.uploadVersion !== undefined) {
    const used = facts.uploadVersion;
    const same = used.sourceHash === intent.sourceHash && used.version === intent.version && used.fileSizeBytes === intent.fileSizeBytes;
    if (same) return existing(used, "retry");
    if (used.sourceHash === intent.sourceHash && !intent.force) {
      // Deduplication's answer, the newest version of the source; but an
      // activation it asks for has no upload to be recorded on (this one
      // is used up), so that is still another push.
      const answer = facts.duplicate ?? used;
      if (!(intent.setAsActive && !answer.isActive)) return { kind: "existing", version: answer, reason: "duplicate", activate: false };
    }
    return { kind: "upload-used", existing: used };
  }
  if (facts.duplicate !== undefined && !intent.force) return existing(facts.duplicate, "duplicate");
  const fresh = facts.tipVersionId === undefined ? intent.baseVersionId === "" : intent.baseVersionId === facts.tipVersionId;
  if (!fresh) return { kind: "stale" };
  if (facts.versionTaken !== undefined) return { kind: "version-taken", existing: facts.versionTaken };
  // An upload that made a duplicate active is used up, even one still
  // "issued" (recorded so before such uploads were marked confirmed).
  if (confirm && (!facts.uploadIssued || facts.uploadActivatedId !== undefined)) return { kind: "upload-missing" };
  return { kind: "create", claim: facts.access === "claim" };
}

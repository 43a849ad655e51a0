/**
 * What a push (GetUploadUrl or ConfirmUpload) should do, decided from the
 * entity's state. Deduplication comes before push protection (spec 4.2 rule
 * 2), so re-pushing published source answers the existing version even from
 * a stale base; `force` skips deduplication but never push protection (spec
 * 4.7).
 */
export type PushDecision<V> =
  | { readonly kind: "existing"; readonly version: V }
  | { readonly kind: "stale" }
  | { readonly kind: "proceed" };

/** The entity's state a push decision is made from. */
export interface PushState<V> {
  /** The most recent version with the pushed source hash, if any. */
  readonly duplicate: V | undefined;
  /** Id of the entity's tip; undefined when it has no versions. */
  readonly tipVersionId: string | undefined;
}

/** The push's own parameters a decision is made from. */
export interface PushRequest {
  /** The base the client built on; "" when it named none. */
  readonly baseVersionId: string;
  readonly force: boolean;
}

/** Decides a push; pure, so both endpoints and the tests share one rule. */
export function decidePush<V>(state: PushState<V>, request: PushRequest): PushDecision<V> {
  if (state.duplicate !== undefined && !request.force) return { kind: "existing", version: state.duplicate };
  const fresh =
    state.tipVersionId === undefined ? request.baseVersionId === "" : request.baseVersionId === state.tipVersionId;
  return fresh ? { kind: "proceed" } : { kind: "stale" };
}

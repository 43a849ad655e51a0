import { untilAborted } from "../store/abandon.js";

/**
 * Turns, per entity, at copying an upload into a new version, among the
 * confirms of this process: at most one confirm of an entity copies and
 * records at a time, and the others wait for it, then decide again.
 *
 * Why: of the confirms that race on one entity from one base, one creates
 * a version and every other is refused STALE_BASE. Deciding them all at
 * once from the same tip makes every loser copy its package first (a blob
 * copy each, then a delete) only to be refused under the entity's lock.
 * Waiting for the one in front lets a loser learn from a plain read that
 * the tip moved, before it asks anything of the blob store.
 *
 * This orders work inside one process only; it decides nothing. Confirms
 * from other replicas, and every decision, are still settled by the
 * entity's row lock in the database.
 */
export class SealTurns {
  readonly #held = new Map<string, Promise<void>>();
  /** Counts releases, of any entity's turn. */
  #releases = 0;
  /** The count when each entity's turn was last released; cleared when it grows large (a decision made again costs one read). */
  readonly #releasedAt = new Map<string, number>();

  /** Where the releases stand: taken before a confirm decides, and given to take(). */
  mark(): number {
    return this.#releases;
  }

  /**
   * Takes the entity's turn and returns its release, or, when another
   * confirm of this process holds it, returns undefined once that confirm
   * has released it (the caller decides again, then asks again). Also
   * undefined when a turn of the entity ended since `since` (mark()): the
   * caller's decision may predate what that confirm recorded. Stops
   * waiting with the signal's reason when it aborts.
   */
  async take(entityId: string, signal: AbortSignal, since = Infinity): Promise<(() => void) | undefined> {
    const held = this.#held.get(entityId);
    if (held !== undefined) {
      await untilAborted(held, signal);
      return undefined;
    }
    if ((this.#releasedAt.get(entityId) ?? -1) >= since) return undefined;
    let release!: () => void;
    const turn = new Promise<void>((resolve) => (release = resolve));
    this.#held.set(entityId, turn);
    return () => {
      if (this.#held.get(entityId) === turn) this.#held.delete(entityId);
      if (this.#releasedAt.size >= 10_000) this.#releasedAt.clear();
      this.#releasedAt.set(entityId, this.#releases++);
      release();
    };
  }
}

import { failsAlike } from "./db-errors.js";

/** How a confirm grouper sends confirms to the database. */
export interface ConfirmGrouperOptions<I extends { readonly entityId: string }, O> {
  /** Records one confirm in a transaction of its own: the path every confirm can take. */
  readonly alone: (input: I) => Promise<O>;
  /**
   * Records several confirms, each on a different entity, in one
   * transaction; answers undefined for each one it left for `alone`
   * (anything but a plain creation), and throws when the group as a
   * whole failed (nothing of it was written).
   */
  readonly together: (inputs: readonly I[]) => Promise<ReadonlyArray<O | undefined>>;
  /** Whether a confirm may join a group at all. */
  readonly groupable: (input: I) => boolean;
  /** Most confirms in one group. */
  readonly maxGroup: number;
  /** Longest a confirm waits for the transactions in flight to end before it goes anyway. */
  readonly maxWaitMs: number;
  /** Told each group's size and how many of it the group recorded (for the metrics). */
  readonly onGroup?: (size: number, recorded: number) => void;
}

interface Pending<I, O> {
  readonly input: I;
  resolve(outcome: O): void;
  reject(error: unknown): void;
}

/**
 * Sends the confirms that arrive while the event loop handles one round of
 * I/O to the database together, on the next turn (`setImmediate`), as one
 * transaction for up to `maxGroup` of them, each on a different entity.
 *
 * Why: a confirm's transaction is seven statements, and on a loaded
 * service the round trips, not the work, are most of its cost (the socket
 * write and read on both ends, the pool, the statement's setup in the
 * server). A group pays each statement once for all its confirms. A
 * confirm is never held back for others: at low load the group is the one
 * confirm, which goes alone, on the same turn.
 *
 * A group never changes an answer: it only records plain creations, and
 * every confirm it leaves (a refusal, a duplicate, a stale base, an
 * entity another transaction holds) is then decided alone, by the same
 * code as an ungrouped confirm, after the group's transaction ended. When
 * the group fails as a whole every confirm of it is decided alone, unless
 * the database is unreachable or the statement ran out of time, which
 * every confirm of the group is told at once. Two confirms on one entity
 * never share a group: the second goes alone, and queues behind the first
 * on the entity's lock as it would anyway.
 */
export function confirmGrouper<I extends { readonly entityId: string }, O>(options: ConfirmGrouperOptions<I, O>): (input: I) => Promise<O> {
  const { alone, together, groupable, maxGroup, maxWaitMs, onGroup } = options;
  let pending: Array<Pending<I, O>> = [];
  /** Transactions this grouper started and that have not ended. */
  let inFlight = 0;
  let immediate: NodeJS.Immediate | undefined;
  let timer: NodeJS.Timeout | undefined;

  function schedule(): void {
    if (inFlight === 0) {
      immediate ??= setImmediate(flush);
    } else {
      timer ??= setTimeout(flush, maxWaitMs);
    }
  }

  function ended(): void {
    inFlight--;
    if (inFlight === 0 && pending.length > 0) schedule();
  }

  function runAlone(p: Pending<I, O>): void {
    alone(p.input).then(p.resolve, p.reject);
  }

  async function runGroup(group: ReadonlyArray<Pending<I, O>>): Promise<void> {
    let outcomes: ReadonlyArray<O | undefined>;
    try {
      outcomes = await together(group.map((p) => p.input));
    } catch (error: unknown) {
      onGroup?.(group.length, 0);
      if (failsAlike(error)) {
        for (const p of group) p.reject(error);
        return;
      }
      group.forEach(runAlone);
      return;
    }
    onGroup?.(group.length, outcomes.filter((o) => o !== undefined).length);
    group.forEach((p, i) => {
      const outcome = outcomes[i];
      if (outcome === undefined) runAlone(p);
      else p.resolve(outcome);
    });
  }

  function flush(): void {
    if (immediate !== undefined) clearImmediate(immediate);
    if (timer !== undefined) clearTimeout(timer);
    immediate = timer = undefined;
    const queued = pending;
    pending = [];
    const grouped: Array<Pending<I, O>> = [];
    const entities = new Set<string>();
    for (const p of queued) {
      if (!groupable(p.input) || entities.has(p.input.entityId)) runAlone(p);
      else {
        entities.add(p.input.entityId);
        grouped.push(p);
      }
    }
    if (grouped.length === 0) return;
    // Even groups (9 confirms at most 8 a group: 5 and 4, not 8 and 1).
    const per = Math.ceil(grouped.length / Math.ceil(grouped.length / maxGroup));
    for (let i = 0; i < grouped.length; i += per) {
      const group = grouped.slice(i, i + per);
      inFlight++;
      if (group.length === 1) {
        const p = group[0]!;
        alone(p.input).then(p.resolve, p.reject).finally(ended);
      } else {
        runGroup(group)
          // Whatever goes wrong, every confirm of the group is answered.
          .catch((error: unknown) => {
            for (const p of group) p.reject(error);
          })
          .finally(ended);
      }
    }
  }

  return (input: I) =>
    new Promise<O>((resolve, reject) => {
      pending.push({ input, resolve, reject });
      schedule();
    });
}

import { classifyDbError } from "./db-errors.js";

/** How a confirm grouper sends confirms to the database. */
export interface ConfirmGrouperOptions<I extends { readonly entityId: string }, O> {
  /** Records one confirm in a transaction of its own: the path every confirm can take. */
  readonly alone: (input: I) => Promise<O>;
  /**
   * Decides a confirm that was held while another on its entity was on its
   * way (most often that one moved the tip, and this one is stale now);
   * `alone` when not given.
   */
  readonly released?: (input: I) => Promise<O>;
  /**
   * Records several confirms, each on a different entity, in one
   * transaction; answers undefined for each one it left for `alone`
   * (anything but a plain creation), and throws when the group as a
   * whole failed: nothing of it was written, or, when the connection was
   * lost after its COMMIT was sent (CommitOutcomeUnknownError), perhaps all
   * of it, which each confirm's caller is told.
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
 * Sends confirms on different entities that arrive together to the
 * database in one transaction, up to `maxGroup` of them.
 *
 * Why: a confirm's transaction is seven statements, and on a loaded
 * service the round trips, not the work, are most of its cost (the socket
 * write and read on both ends, the pool, the statement's setup in the
 * server). A group pays each statement once for all its confirms.
 *
 * When: with no transaction of this grouper in flight (low load), a
 * confirm goes on the next turn of the event loop (`setImmediate`), with
 * whatever arrived in the same round of I/O, usually alone. While one is
 * in flight, arriving confirms wait for it to end and then go together;
 * that is what makes the groups big under load. They wait at most
 * `maxWaitMs`, in case the transaction in flight is stuck on a lock.
 *
 * A group never changes an answer: it only records plain creations, and
 * every confirm it leaves (a refusal, a duplicate, a stale base, an entity
 * another transaction holds) is then decided alone, by the same code as an
 * ungrouped confirm, after the group's transaction ended. When the group
 * fails as a whole every confirm of it is decided alone, unless the
 * database is unreachable, which every confirm of the group is told at
 * once. A confirm on an entity that already has one on its way here (in
 * this flush, or in flight) is held until that one is answered, then
 * decided by `released`: two confirms on one entity never share a group, and a
 * group never waits on a confirm of its own process for an entity's lock.
 */
export function confirmGrouper<I extends { readonly entityId: string }, O>(options: ConfirmGrouperOptions<I, O>): (input: I) => Promise<O> {
  const { alone, together, groupable, maxGroup, maxWaitMs, onGroup } = options;
  const released = options.released ?? alone;
  let pending: Array<Pending<I, O>> = [];
  /** Transactions this grouper started from a flush and that have not ended. */
  let inFlight = 0;
  let immediate: NodeJS.Immediate | undefined;
  let timer: NodeJS.Timeout | undefined;
  /** Entities with a confirm on its way; confirms on them that came later, held until it is answered. */
  const busy = new Map<string, { running: number; held: Array<Pending<I, O>> }>();

  function schedule(): void {
    if (inFlight === 0) immediate ??= setImmediate(flush);
    else timer ??= setTimeout(flush, maxWaitMs);
  }

  function ended(): void {
    inFlight--;
    if (inFlight === 0 && pending.length > 0) schedule();
  }

  /** Marks the entity busy until this confirm is answered, and wraps its answer to say so. */
  function track(p: Pending<I, O>): Pending<I, O> {
    const id = p.input.entityId;
    const entry = busy.get(id);
    if (entry === undefined) busy.set(id, { running: 1, held: [] });
    else entry.running++;
    let settled = false;
    const answered = () => {
      // A promise settles once; so does the entity's count.
      if (settled) return;
      settled = true;
      const e = busy.get(id)!;
      e.running--;
      if (e.running > 0) return;
      if (e.held.length === 0) {
        busy.delete(id);
        return;
      }
      // Released together, each on its own: those that still create queue
      // on the entity's lock, as confirms on one entity do.
      const held = e.held;
      e.held = [];
      for (const h of held) {
        const t = track(h);
        released(t.input).then(t.resolve, t.reject);
      }
    };
    return {
      input: p.input,
      resolve: (o) => {
        answered();
        p.resolve(o);
      },
      reject: (e) => {
        answered();
        p.reject(e);
      },
    };
  }

  function runAlone(p: Pending<I, O>): Promise<void> {
    return alone(p.input).then(p.resolve, p.reject);
  }

  function report(size: number, recorded: number): void {
    try {
      onGroup?.(size, recorded);
    } catch {
      // Metrics must never change an answer.
    }
  }

  async function runGroup(group: ReadonlyArray<Pending<I, O>>): Promise<void> {
    let outcomes: ReadonlyArray<O | undefined>;
    try {
      outcomes = await together(group.map((p) => p.input));
    } catch (error: unknown) {
      report(group.length, 0);
      // An unreachable database fails every confirm alike; retrying each
      // alone would make them wait twice for the same answer. Anything else
      // (a lock wait, a deadlock, a timeout, a duplicate key) may be one
      // confirm's trouble, so each is decided alone.
      if (classifyDbError(error) === "unavailable") {
        for (const p of group) p.reject(error);
        return;
      }
      for (const p of group) void runAlone(p);
      return;
    }
    report(group.length, outcomes.filter((o) => o !== undefined).length);
    group.forEach((p, i) => {
      const outcome = outcomes[i];
      if (outcome === undefined) void runAlone(p);
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
    for (const p of queued) {
      const entry = busy.get(p.input.entityId);
      if (entry !== undefined) entry.held.push(p);
      else if (!groupable(p.input)) void runAlone(track(p));
      else grouped.push(track(p));
    }
    if (grouped.length === 0) return;
    // Even groups (9 confirms at most 8 a group: 5 and 4, not 8 and 1).
    const per = Math.ceil(grouped.length / Math.ceil(grouped.length / maxGroup));
    for (let i = 0; i < grouped.length; i += per) {
      const group = grouped.slice(i, i + per);
      inFlight++;
      const run = group.length === 1 ? runAlone(group[0]!) : runGroup(group);
      run
        // Whatever goes wrong, every confirm of the group is answered.
        .catch((error: unknown) => {
          for (const p of group) p.reject(error);
        })
        .finally(ended);
    }
  }

  return (input: I) =>
    new Promise<O>((resolve, reject) => {
      pending.push({ input, resolve, reject });
      schedule();
    });
}

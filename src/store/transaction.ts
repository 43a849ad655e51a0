import type { Knex } from "knex";
import { untilAborted } from "./abandon.js";
import { classifyDbError, CommitOutcomeUnknownError, lostBeforeAnswer } from "./db-errors.js";
import { entitiesWithEventsIn } from "./event-log.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How a transaction runs. */
export interface TransactionOptions {
  /** Tries in all, when a deadlock or lock-wait timeout rolls it back (default 3). */
  readonly attempts?: number;
  /** The call's signal: once it aborts, nobody waits for the transaction, and it never commits. */
  readonly signal?: AbortSignal | undefined;
  /** Told, once the commit succeeded, of the entities whose events the transaction wrote (insertEvents); not called when there are none. */
  readonly onEventsCommitted?: ((entityIds: readonly string[]) => void) | undefined;
}

/** Rolls a transaction back, whatever state it is in. */
async function rollback(trx: Knex.Transaction): Promise<void> {
  if (!trx.isCompleted()) await trx.rollback().catch(() => undefined);
}

/**
 * Runs `work` in a transaction that commits only when it returns
 * `commit: true` (so a refused push leaves no trace, not even an entity
 * row), and returns only once the commit is known to have succeeded. A
 * deadlock or lock-wait timeout rolls the whole transaction back, so it is
 * retried, twice, after a short random pause; if it still fails the caller
 * answers DATABASE_BUSY, which is retryable.
 *
 * When the call's signal aborts (its deadline) the caller is answered at
 * once; the transaction is left to finish what it is waiting for and is
 * then rolled back, so an answer of DEADLINE_EXCEEDED never hides a write
 * made after it. (A COMMIT already sent when the deadline passes may still
 * land: the caller retries, which is safe.)
 *
 * A connection that fails once COMMIT was sent throws
 * CommitOutcomeUnknownError (COMMIT_OUTCOME_UNKNOWN): the change may have
 * landed, so it is neither retried here nor answered "nothing was changed".
 */
export async function inTransaction<T>(
  knex: Knex,
  work: (trx: Knex.Transaction) => Promise<{ commit: boolean; result: T }>,
  options: TransactionOptions = {},
): Promise<T> {
  const { attempts = 3, signal, onEventsCommitted } = options;
  for (let attempt = 1; ; attempt++) {
    const begun = knex.transaction();
    const trx = await untilAborted(begun, signal).catch((error: unknown) => {
      // Acquired after the caller gave up: released unused.
      void begun.then(rollback, () => undefined);
      throw error;
    });
    let result: T;
    try {
      const running = work(trx);
      const done = await untilAborted(running, signal).catch((error: unknown) => {
        if (signal?.aborted === true) void running.then(() => rollback(trx), () => rollback(trx));
        throw error;
      });
      const commit = done.commit;
      result = done.result;
      if (commit && signal?.aborted !== true) {
        try {
          await trx.commit();
          // Knex's commit() resolves even when COMMIT fails (a connection lost
          // mid-commit); the failure only rejects the transaction's promise.
          // Without this, a write that never landed would be reported done.
          await trx.executionPromise;
        } catch (error) {
          // A connection lost before the server answered the COMMIT leaves its
          // fate unknown; an answer (a deadlock, retried below) does not.
          throw lostBeforeAnswer(error) ? new CommitOutcomeUnknownError(error) : error;
        }
      } else {
        await trx.rollback();
        if (signal?.aborted === true) throw signal.reason;
        return result;
      }
    } catch (thrown) {
      if (signal?.aborted === true) throw thrown;
      let error = thrown;
      if (!trx.isCompleted()) await trx.rollback().catch(() => undefined);
      else if (/Transaction query already complete/.test((thrown as Error)?.message ?? "")) {
        // Knex ended the transaction itself (its connection died); the
        // reason is on the transaction's own promise, not on this query.
        error = (await trx.executionPromise.then(() => undefined, (cause: unknown) => cause)) ?? thrown;
      }
      if (attempt >= attempts || classifyDbError(error) !== "busy") throw error;
      await sleep(5 + Math.random() * 20 * attempt);
      continue;
    }
    // Committed: announced outside the try, so that nothing here can turn
    // a change that landed into an error and a retry.
    const announced = entitiesWithEventsIn(trx);
    if (announced.length > 0) onEventsCommitted?.(announced);
    return result;
  }
}

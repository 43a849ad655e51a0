import type { Knex } from "knex";
import { classifyDbError } from "./db-errors.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `work` in a transaction that commits only when it returns
 * `commit: true` (so a refused push leaves no trace, not even an entity
 * row), and returns only once the commit is known to have succeeded. A deadlock or lock-wait timeout rolls the whole transaction back, so
 * it is retried, twice, after a short random pause; if it still fails the
 * caller answers DATABASE_BUSY, which is retryable.
 */
export async function inTransaction<T>(
  knex: Knex,
  work: (trx: Knex.Transaction) => Promise<{ commit: boolean; result: T }>,
  attempts = 3,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const trx = await knex.transaction();
    try {
      const { commit, result } = await work(trx);
      if (commit) {
        await trx.commit();
        // Knex's commit() resolves even when COMMIT fails (a connection lost
        // mid-commit); the failure only rejects the transaction's promise.
        // Without this, a write that never landed would be reported done.
        await trx.executionPromise;
      } else await trx.rollback();
      return result;
    } catch (thrown) {
      let error = thrown;
      if (!trx.isCompleted()) await trx.rollback().catch(() => undefined);
      else if (/Transaction query already complete/.test((thrown as Error)?.message ?? "")) {
        // Knex ended the transaction itself (its connection died); the
        // reason is on the transaction's own promise, not on this query.
        error = (await trx.executionPromise.then(() => undefined, (cause: unknown) => cause)) ?? thrown;
      }
      if (attempt >= attempts || classifyDbError(error) !== "busy") throw error;
      await sleep(5 + Math.random() * 20 * attempt);
    }
  }
}

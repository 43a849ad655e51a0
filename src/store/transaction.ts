import type { Knex } from "knex";
import { classifyDbError } from "./db-errors.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `work` in a transaction that commits only when it returns
 * `commit: true` (so a refused push leaves no trace, not even an entity
 * row). A deadlock or lock-wait timeout rolls the whole transaction back, so
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
      if (commit) await trx.commit();
      else await trx.rollback();
      return result;
    } catch (error) {
      if (!trx.isCompleted()) await trx.rollback().catch(() => undefined);
      if (attempt >= attempts || classifyDbError(error) !== "busy") throw error;
      await sleep(5 + Math.random() * 20 * attempt);
    }
  }
}

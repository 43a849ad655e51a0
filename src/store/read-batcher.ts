import { untilAborted } from "./abandon.js";
import { classifyDbError } from "./db-errors.js";
import type { RunPrepared } from "./prepared.js";
import { nextPowerOfTwo } from "./statement-shapes.js";

/** Runs one read whose rows are wanted on their own; resolves with that read's rows only, or rejects once `signal` aborts. */
export type RunBatched = <T>(sql: string, params: readonly unknown[], signal?: AbortSignal) => Promise<T[]>;

interface Pending {
  readonly params: readonly unknown[];
  readonly signal: AbortSignal | undefined;
  resolve(rows: unknown[]): void;
  reject(error: unknown): void;
}

/** How a read batcher batches. */
export interface ReadBatcherOptions {
  /** Most reads in one statement. */
  readonly maxBatch: number;
  /** Told each statement's number of reads (for the batch-size metric). */
  readonly onBatch?: (reads: number) => void;
}

/** The column that says which read of a batch a row answers; never a column of the tables. */
const partColumn = "batch_part";

/** An unreachable database or a statement out of time fails every read of a batch alike. */
function failsEveryRead(error: unknown): boolean {
  const kind = classifyDbError(error);
  return kind === "unavailable" || kind === "timeout";
}

/**
 * Coalesces concurrent reads of the same SQL into one statement: the reads
 * queued while the event loop handles a round of I/O are sent together, on
 * the next turn (`setImmediate`), as `(select 0 as batch_part, …) union
 * all (select 1 as batch_part, …)`, and each read gets back only its own
 * rows.
 *
 * Why: on a loaded service most of a read's cost is the round trip (the
 * socket write and read on both ends, the pool, the statement's setup in
 * the server), not the lookup; a batch pays it once. A read is never held
 * back for others: at low load the batch is the one read, sent at the end
 * of the same turn. Every part keeps its own `where e.id = ?`, so each is
 * an entity-scoped lookup (a sharded store would batch per shard), and one
 * statement is one consistent snapshot, so a read still sees every commit
 * that finished before it began.
 *
 * The SQL must be one `select …`. A union does not keep its parts' row
 * order, so a read whose rows are ordered sorts them again. Batches hold
 * at most `maxBatch` reads and are padded to a power of two with parts
 * whose parameters are all NULL (they match nothing), so each read shape
 * is a handful of prepared statements. A batch that fails is retried read
 * by read, so that one read's failure is only its own, unless the
 * database is unreachable or the statement ran out of time, which every
 * read of the batch is told at once.
 */
export function readBatcher(run: RunPrepared, options: ReadBatcherOptions): RunBatched {
  const { maxBatch, onBatch } = options;
  const queues = new Map<string, Pending[]>();
  const statements = new Map<string, string>();
  let scheduled = false;

  function statement(sql: string, size: number): string {
    const key = `${size}\u0000${sql}`;
    let text = statements.get(key);
    if (text === undefined) {
      if (!/^select /i.test(sql)) throw new Error(`readBatcher: not a select: ${sql}`);
      const body = sql.slice("select ".length);
      // Each part in parentheses, so that a part may have its own ORDER BY
      // and LIMIT (MySQL and MariaDB syntax; SQLite is never batched).
      text = Array.from({ length: size }, (_, i) => `(select ${i} as ${partColumn}, ${body})`).join(" union all ");
      statements.set(key, text);
    }
    return text;
  }

  async function runAlone(sql: string, p: Pending): Promise<void> {
    try {
      p.resolve(await run(sql, p.params));
    } catch (error: unknown) {
      p.reject(error);
    }
  }

  async function runBatch(sql: string, batch: readonly Pending[]): Promise<void> {
    onBatch?.(batch.length);
    if (batch.length === 1) return runAlone(sql, batch[0]!);
    const size = nextPowerOfTwo(batch.length);
    const params: unknown[] = [];
    for (const p of batch) params.push(...p.params);
    // The padding parts' parameters are all NULL: `e.id = NULL` matches
    // nothing, so they cost the server next to nothing and return no rows.
    const perPart = batch[0]!.params.length;
    for (let i = batch.length * perPart; i < size * perPart; i += 1) params.push(null);
    // Outside the try: SQL that cannot be batched is a bug to surface, not
    // a failure to retry read by read.
    const text = statement(sql, size);
    let rows: Array<Record<string, unknown>>;
    try {
      rows = await run<Record<string, unknown>>(text, params);
    } catch (error: unknown) {
      // An unreachable database or a statement that ran out of time fails
      // every read alike; retrying each alone would make them wait twice
      // for the same answer and load a struggling server further.
      if (failsEveryRead(error)) {
        for (const p of batch) p.reject(error);
        return;
      }
      await Promise.all(batch.map((p) => runAlone(sql, p)));
      return;
    }
    const byPart: unknown[][] = batch.map(() => []);
    for (const row of rows) {
      const part = Number(row[partColumn]);
      // The part column stays on the row: deleting a property would turn
      // the driver's row object into a slow dictionary.
      if (part < batch.length) byPart[part]!.push(row);
    }
    batch.forEach((p, i) => p.resolve(byPart[i]!));
  }

  function flush(): void {
    scheduled = false;
    for (const [sql, all] of queues) {
      // A read whose caller gave up before it was sent is not sent.
      const queue = all.filter((p) => p.signal?.aborted !== true);
      if (queue.length === 0) continue;
      // Even parts (9 reads at most 8 a batch: 5 and 4, not 8 and 1), so
      // that the statements run side by side on the pool take as long.
      const per = Math.ceil(queue.length / Math.ceil(queue.length / maxBatch));
      for (let i = 0; i < queue.length; i += per) {
        const batch = queue.slice(i, i + per);
        // Whatever goes wrong, every read of the batch is answered.
        runBatch(sql, batch).catch((error: unknown) => {
          for (const p of batch) p.reject(error);
        });
      }
    }
    queues.clear();
  }

  return <T>(sql: string, params: readonly unknown[], signal?: AbortSignal) =>
    untilAborted(
      new Promise<T[]>((resolve, reject) => {
        let queue = queues.get(sql);
        if (queue === undefined) {
          queue = [];
          queues.set(sql, queue);
        }
        queue.push({ params, signal, resolve: resolve as (rows: unknown[]) => void, reject });
        if (!scheduled) {
          scheduled = true;
          setImmediate(flush);
        }
      }),
      signal,
    );
}

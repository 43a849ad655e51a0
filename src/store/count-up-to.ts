import type { Knex } from "knex";

/**
 * How many rows a query matches, counted up to `max`: the statement reads
 * at most `max` index entries, so a bound checked on every call, or a gauge
 * read on every scrape, costs no more as the table grows.
 */
export async function countUpTo(knex: Knex, rows: Knex.QueryBuilder, max: number): Promise<number> {
  const bounded = rows.clearSelect().select(knex.raw("1")).limit(max).as("bounded");
  const row = await knex.from(bounded).count<{ n: number | string }[]>({ n: "*" }).first();
  return Number(row?.n ?? 0);
}

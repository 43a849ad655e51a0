import type { Knex } from "knex";

/** Whether the table has an index of this name (Knex's schema builder cannot tell). */
export async function hasIndex(knex: Knex, table: string, name: string): Promise<boolean> {
  const found: unknown =
    knex.client.config.client === "mysql2"
      ? ((await knex.raw("select 1 from information_schema.statistics where table_schema = database() and table_name = ? and index_name = ? limit 1", [table, name])) as unknown as [unknown[]])[0]
      : await knex.raw("select 1 from sqlite_master where type = 'index' and tbl_name = ? and name = ?", [table, name]);
  return Array.isArray(found) && found.length > 0;
}

import type { Knex } from "knex";
import { addColumnResuming } from "./resumable.js";

/**
 * The package's content fingerprint (Content-MD5, base64) as the blob store
 * reported it at confirm; null for versions confirmed before it was
 * recorded, or uploaded without one.
 */
export async function up(knex: Knex): Promise<void> {
  await addColumnResuming(knex, "versions", "package_md5", (t) => {
    t.string("package_md5", 32).nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("versions", (t) => t.dropColumn("package_md5"));
}

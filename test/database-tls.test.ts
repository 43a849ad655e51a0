// DATABASE_URL's TLS settings reach the MySQL driver: with ssl-mode set, a
// session is encrypted, or refused by a server that offers no TLS (as the
// test MariaDB does), never opened in the clear.
import { test } from "uvu";
import * as assert from "uvu/assert";
import { loadConfig } from "../src/config.js";
import { openDatabase } from "../src/store/database.js";
import { createTestDatabase, mysqlAvailable } from "./support/env.js";

if (await mysqlAvailable()) {
  test("ssl-mode=REQUIRED: the session is encrypted, or refused by a server without TLS; without it the same server answers", async () => {
    const tdb = await createTestDatabase("mysql");
    const cipherOf = async (url: string) => {
      const db = openDatabase(loadConfig({ DATABASE_URL: url }).database, { warn: () => undefined, error: () => undefined });
      try {
        const [rows] = (await db.knex.raw("SHOW SESSION STATUS LIKE 'Ssl_cipher'")) as [Array<{ Value: string }>];
        return { cipher: rows[0]?.Value ?? "" };
      } catch (error) {
        return { error: String(error) };
      } finally {
        await db.knex.destroy();
      }
    };
    try {
      const plain = await cipherOf(tdb.url);
      assert.equal(plain, { cipher: "" }, "no ssl-mode: in the clear, as before");
      const tls = await cipherOf(`${tdb.url}?ssl-mode=REQUIRED`);
      if ("error" in tls) assert.match(tls.error!, /ssl|secure|tls/i, tls.error);
      else assert.ok(tls.cipher !== "", "an encrypted session");
    } finally {
      await tdb.drop();
    }
  });
}

test.run();

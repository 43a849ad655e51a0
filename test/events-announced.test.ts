// A transaction announces the entities whose events it wrote once, and only
// once, it has committed: the event hub's prompt never runs ahead of the
// database, nor is it missed by a write path.
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { insertEvents, numberEvents } from "../src/store/event-log.js";
import { migrateLatest } from "../src/store/migrate.js";
import { inTransaction } from "../src/store/transaction.js";
import { type Backend, connectTestDatabase, createTestDatabase, mysqlAvailable } from "./support/env.js";

function defineSuite(backend: Backend): void {
  const s = suite(`${backend}: events announced at commit`);

  s("a commit announces its events' entities; a rollback, or a commit without events, announces nothing", async () => {
    const tdb = await createTestDatabase(backend);
    const knex = connectTestDatabase(backend, tdb);
    try {
      await migrateLatest(knex);
      for (const id of ["a", "b"]) await knex("entities").insert({ id, last_seq: 0, created_at: new Date() });
      const heard: string[][] = [];
      const onEventsCommitted = (ids: readonly string[]) => void heard.push([...ids]);
      const change = { actor: "me", at: new Date() };
      const write = (entity: string, seq: number) => numberEvents(entity, seq, change, [{ type: "VERSION_DELETED", versionId: `v${seq}`, version: "2020.01.01-000001" }]).rows;

      const committed = await inTransaction(
        knex,
        async (trx) => {
          await insertEvents(trx, [...write("a", 0), ...write("b", 0)]);
          // Not yet committed: nothing announced.
          assert.equal(heard, []);
          return { commit: true, result: "done" };
        },
        { onEventsCommitted },
      );
      assert.is(committed, "done");
      assert.equal(heard, [["a", "b"]]);

      await inTransaction(
        knex,
        async (trx) => {
          await insertEvents(trx, write("a", 1));
          return { commit: false, result: undefined };
        },
        { onEventsCommitted },
      );
      await inTransaction(knex, async () => ({ commit: true, result: undefined }), { onEventsCommitted });
      assert.equal(heard, [["a", "b"]], "a rollback and an eventless commit announce nothing");
      assert.is((await knex("entity_events").select("seq")).length, 2, "the rolled-back event is not there");
    } finally {
      await knex.destroy();
      await tdb.drop();
    }
  });

  s.run();
}

defineSuite("sqlite");
if (await mysqlAvailable()) defineSuite("mysql");

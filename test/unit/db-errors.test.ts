// How database errors are sorted (src/store/db-errors.ts), on errors a real
// SQLite raises: two connections to one file, as two processes would have.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import knexFactory from "knex";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { classifyDbError, CommitOutcomeUnknownError, lostBeforeAnswer } from "../../src/store/db-errors.js";

test("a stale snapshot's write (SQLITE_BUSY_SNAPSHOT) is a conflict to retry, not a bug", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-db-errors-"));
  const open = () => knexFactory({ client: "better-sqlite3", connection: { filename: path.join(dir, "x.db") }, useNullAsDefault: true });
  const a = open();
  const b = open();
  try {
    await a.raw("PRAGMA journal_mode = WAL");
    await a.raw("CREATE TABLE t (n INTEGER)");
    const trx = await a.transaction();
    await trx.raw("SELECT count(*) FROM t");
    await b.raw("INSERT INTO t VALUES (1)");
    const error = await trx.raw("INSERT INTO t VALUES (2)").then(() => undefined, (caught: unknown) => caught);
    assert.is((error as { code?: string } | undefined)?.code, "SQLITE_BUSY_SNAPSHOT");
    assert.is(classifyDbError(error), "busy");
    await trx.rollback().catch(() => undefined);
  } finally {
    await a.destroy();
    await b.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("plain SQLITE_BUSY (the busy timeout spent) is an outage; a lost COMMIT is told apart from both", () => {
  assert.is(classifyDbError(Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" })), "unavailable");
  assert.is(classifyDbError(Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY_TIMEOUT" })), "unavailable");
  // Only a connection lost before the server answered leaves a COMMIT's fate unknown.
  assert.ok(lostBeforeAnswer(Object.assign(new Error("Connection lost: The server closed the connection."), { code: "PROTOCOL_CONNECTION_LOST", fatal: true })));
  assert.ok(lostBeforeAnswer(Object.assign(new Error("connect EHOSTUNREACH"), { code: "EHOSTUNREACH", fatal: true })));
  assert.not.ok(lostBeforeAnswer(Object.assign(new Error("write EPIPE"), { code: "EPIPE", syscall: "write", fatal: true })), "the COMMIT never left");
  assert.not.ok(lostBeforeAnswer(new Error("Can't add new command when connection is in closed state")));
  assert.not.ok(lostBeforeAnswer(Object.assign(new Error("Deadlock found"), { code: "ER_LOCK_DEADLOCK", errno: 1213 })));
  assert.not.ok(lostBeforeAnswer(Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" })));
  const lost = new CommitOutcomeUnknownError(Object.assign(new Error("Connection lost"), { code: "PROTOCOL_CONNECTION_LOST", fatal: true }));
  assert.instance(lost, CommitOutcomeUnknownError);
  assert.match(lost.message, /may have been made/);
});

test.run();

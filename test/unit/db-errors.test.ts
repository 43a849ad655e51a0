// How database errors are sorted (src/store/db-errors.ts), on errors a real
// SQLite raises: two connections to one file, as two processes would have.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { classifyDbError, CommitOutcomeUnknownError } from "../../src/store/db-errors.js";

test("a stale snapshot's write (SQLITE_BUSY_SNAPSHOT) is a conflict to retry, not a bug", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-db-errors-"));
  const a = new Database(path.join(dir, "x.db"));
  const b = new Database(path.join(dir, "x.db"));
  try {
    a.pragma("journal_mode = WAL");
    a.exec("CREATE TABLE t (n INTEGER)");
    a.exec("BEGIN");
    a.prepare("SELECT count(*) FROM t").get();
    b.exec("INSERT INTO t VALUES (1)");
    let error: unknown;
    try {
      a.exec("INSERT INTO t VALUES (2)");
    } catch (caught) {
      error = caught;
    }
    assert.is((error as { code?: string }).code, "SQLITE_BUSY_SNAPSHOT");
    assert.is(classifyDbError(error), "busy");
    a.exec("ROLLBACK");
  } finally {
    a.close();
    b.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("plain SQLITE_BUSY (the busy timeout spent) is an outage; a lost COMMIT is told apart from both", () => {
  assert.is(classifyDbError(Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" })), "unavailable");
  const lost = new CommitOutcomeUnknownError(Object.assign(new Error("Connection lost"), { code: "PROTOCOL_CONNECTION_LOST", fatal: true }));
  assert.instance(lost, CommitOutcomeUnknownError);
  assert.match(lost.message, /may have been made/);
});

test.run();

import { suite } from "uvu";
import * as assert from "uvu/assert";
import { BlobStoreUnavailableError } from "../../src/blob/blob-store.js";
import { messageWithCauses, startupHint } from "../../src/ops/startup-hint.js";

const s = suite("start-up hints: an error that stops the start says what to do");
const settings = { host: "127.0.0.1", port: 8080, databaseName: "versions", databaseKind: "mysql" as const };
const failure = (code: string) => Object.assign(new Error(code), { code });

s("Knex names every failure to take its migration lock MigrationLocked: only a lock that is held gets the unlock advice; a read-only server gets its own", () => {
  const locked = Object.assign(new Error("Migration table is already locked"), { name: "MigrationLocked" });
  assert.match(startupHint(locked, settings), "npm run migrate:unlock");
  const readOnly = Object.assign(new Error("update `knex_migrations_lock` set `is_locked` = 1 - The MariaDB server is running with the --read-only option so it cannot execute this statement"), { name: "MigrationLocked" });
  const hint = startupHint(readOnly, settings);
  assert.match(hint, "read-only");
  assert.match(hint, "DATABASE_URL");
  assert.not.match(hint, "migrate:unlock");
  assert.match(startupHint(Object.assign(new Error("x"), { code: "ER_OPTION_PREVENTS_STATEMENT" }), settings), "read-only");
  assert.is(startupHint(Object.assign(new Error("connect ECONNREFUSED"), { name: "MigrationLocked" }), { ...settings, databaseKind: "sqlite" }).includes("migrate:unlock"), false);
});

s("each known cause gets its fix, naming the setting", () => {
  assert.match(startupHint(failure("EADDRINUSE"), settings), "another process listens on 127.0.0.1:8080: stop it, or set PORT to a free port");
  assert.match(startupHint(Object.assign(failure("EACCES"), { syscall: "listen" }), { ...settings, port: 80 }), "set PORT to 1024 or above");
  // A folder it may not write is not the port's fault.
  // A folder that cannot be made is refused by the one it would go in.
  const denied = startupHint(Object.assign(failure("EACCES"), { syscall: "mkdir", path: "/var/lib/ev" }), settings);
  assert.match(denied, "this user may not write /var/lib: set DATA_DIR");
  assert.not.match(denied, "PORT");
  assert.match(startupHint(Object.assign(failure("EACCES"), { syscall: "open", path: "/srv/ev.db" }), settings), "this user may not write /srv/ev.db: set DATA_DIR");
  assert.match(startupHint(Object.assign(failure("EROFS"), { syscall: "mkdir", path: "/mnt/ro/ev" }), settings), "/mnt/ro is on a read-only file system: set DATA_DIR");
  assert.match(startupHint(Object.assign(failure("EEXIST"), { syscall: "mkdir", path: "/tmp/f" }), settings), "/tmp/f is a file where a folder is needed");
  // SQLite's failures are not MySQL's.
  const sqlite = startupHint(failure("SQLITE_CANTOPEN"), { ...settings, databaseKind: "sqlite" });
  assert.match(sqlite, "sqlite: path");
  assert.not.match(sqlite, "MySQL");
  assert.match(startupHint(failure("EADDRNOTAVAIL"), settings), "set HOST");
  assert.match(startupHint(failure("ER_BAD_DB_ERROR"), settings), "CREATE DATABASE `versions`");
  assert.match(startupHint(failure("ER_ACCESS_DENIED_ERROR"), settings), "user and password in DATABASE_URL");
  assert.match(startupHint(failure("ER_ACCESS_DENIED_NO_PASSWORD_ERROR"), settings), "user and password in DATABASE_URL");
  assert.match(startupHint(Object.assign(failure("ENOTFOUND"), { hostname: settings.host }), settings), `HOST "${settings.host}" is not a name this machine resolves`);
  assert.match(startupHint(Object.assign(failure("ENOTFOUND"), { hostname: "db.internal" }), settings), "that MySQL is running", "a database host that does not resolve is DATABASE_URL's");
  assert.match(startupHint(failure("ECONNREFUSED"), settings), "that MySQL is running");
  assert.match(startupHint(new BlobStoreUnavailableError("down"), settings), "AZURE_STORAGE_CONNECTION_STRING");
  assert.match(startupHint(new Error("Azurite exited with code 1 before it started: Error: listen EADDRINUSE: address already in use 127.0.0.1:10000"), settings), "set it to a free port");
});

s("an error it knows nothing about gets no hint", () => {
  assert.is(startupHint(new Error("boom"), settings), "");
  assert.is(startupHint("boom", settings), "");
});

s("the message names the causes it does not already say", () => {
  const cause = Object.assign(new Error("getaddrinfo ENOTFOUND acct.blob.core.windows.net"), { code: "ENOTFOUND" });
  assert.is(
    messageWithCauses(new BlobStoreUnavailableError("blob store: create container failed", { cause })),
    "blob store: create container failed: getaddrinfo ENOTFOUND acct.blob.core.windows.net",
  );
  assert.is(messageWithCauses(new Error("x failed: boom", { cause: new Error("boom") })), "x failed: boom", "a cause already said is not repeated");
  assert.is(messageWithCauses("plain"), "plain");
  // Knex's text blames a full pool, which at start it never is.
  const timeout = Object.assign(new Error("Knex: Timeout acquiring a connection. The pool is probably full. Are you missing a .transacting(trx) call?"), { name: "KnexTimeoutError" });
  assert.is(messageWithCauses(timeout), "no connection to the database within DATABASE_ACQUIRE_TIMEOUT_MS");
  assert.match(startupHint(timeout, settings), "that MySQL is running and reachable");
});

s.run();

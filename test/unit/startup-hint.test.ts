import { spawnSync } from "node:child_process";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { BlobStoreUnavailableError } from "../../src/blob/blob-store.js";
import { loadDatabaseConfig } from "../../src/config.js";
import { databaseHintSettings, messageWithCauses, startupHint } from "../../src/ops/startup-hint.js";
import { isLockContention } from "../../src/store/migrate.js";

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

s("a MySQL database's name is given to the hints as the server knows it, decoded from DATABASE_URL as the connection decodes it", () => {
  const named = databaseHintSettings(loadDatabaseConfig({ DATABASE_URL: "mysql://root@127.0.0.1:3306/revops_%C3%A9%20v2" }));
  assert.equal(named, { databaseKind: "mysql", databaseName: "revops_é v2" });
  assert.match(startupHint(failure("ER_BAD_DB_ERROR"), { ...settings, ...named }), "CREATE DATABASE `revops_é v2`");
  assert.match(startupHint(failure("ER_DBACCESS_DENIED_ERROR"), { ...settings, ...named }), "GRANT ALL ON `revops_é v2`.*");
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

s("a MySQL user without the rights the service needs on its database is told which to grant", () => {
  // As mysql2 reports them through Knex: the statement, then the server's words.
  const createDenied = Object.assign(
    new Error("create table `knex_migrations_lock` (`index` int unsigned not null auto_increment primary key, `is_locked` int) - CREATE command denied to user 'ev'@'10.0.0.5' for table `versions`.`knex_migrations_lock`"),
    { code: "ER_TABLEACCESS_DENIED_ERROR", errno: 1142 },
  );
  const expected = " (the user in DATABASE_URL lacks rights on the database `versions`: grant it ALL on it, or at least SELECT, INSERT, UPDATE, DELETE, CREATE and ALTER, e.g. GRANT ALL ON `versions`.* TO 'user'@'host')";
  assert.is(startupHint(createDenied, settings), expected);
  const noRightsAtAll = Object.assign(new Error("Access denied for user 'ev'@'%' to database 'versions'"), { code: "ER_DBACCESS_DENIED_ERROR", errno: 1044 });
  assert.is(startupHint(noRightsAtAll, settings), expected);
  assert.not.match(startupHint(noRightsAtAll, settings), "password", "the password was right: the server let the user in");
});

s("a SQLite file this user may not write is named, with the setting that named it, not taken for a held migration lock", () => {
  // Knex's migration lock keeps only the message of SQLite's SQLITE_READONLY.
  const readOnly = Object.assign(new Error("update `knex_migrations_lock` set `is_locked` = 1 where `is_locked` = 0 - attempt to write a readonly database"), { name: "MigrationLocked" });
  const sqlite = { ...settings, databaseKind: "sqlite" as const };
  const byDataDir = startupHint(readOnly, { ...sqlite, sqlite: { file: "/var/lib/ev/entity-versions.db", setting: "DATA_DIR" } });
  assert.is(byDataDir, " (this user may not write /var/lib/ev/entity-versions.db: let it write the file and its folder, or set DATA_DIR to a folder it may write)");
  const byUrl = startupHint(Object.assign(new Error("attempt to write a readonly database"), { code: "SQLITE_READONLY" }), { ...sqlite, sqlite: { file: "/srv/ev.db", setting: "DATABASE_URL" } });
  assert.is(byUrl, " (this user may not write /srv/ev.db: let it write the file and its folder, or set DATABASE_URL's sqlite: path to a file it may write)");
  assert.is(isLockContention(readOnly), false, "waiting would not make the file writable");
  assert.is(isLockContention(Object.assign(new Error("x"), { code: "SQLITE_READONLY_DIRECTORY" })), false);
  assert.is(isLockContention(Object.assign(new Error("Migration table is already locked"), { name: "MigrationLocked" })), true, "a lock held is still waited for");
});

s("a file where the SQLite file's folder should be names DATABASE_URL when that is where the path came from", () => {
  const sqlite = { ...settings, databaseKind: "sqlite" as const };
  const enotdir = (at: string) => Object.assign(failure("ENOTDIR"), { syscall: "mkdir", path: at });
  const byUrl = { ...sqlite, sqlite: { file: "/tmp/afile/x.db", setting: "DATABASE_URL" as const } };
  assert.is(startupHint(enotdir("/tmp/afile"), byUrl), " (/tmp/afile is a file where a folder is needed: set DATABASE_URL's sqlite: path to a file in a folder)");
  assert.match(startupHint(enotdir("/tmp/afile"), { ...sqlite, sqlite: { file: "/tmp/afile/deeper/x.db", setting: "DATABASE_URL" } }), "set DATABASE_URL's sqlite: path");
  assert.match(startupHint(Object.assign(failure("EEXIST"), { syscall: "mkdir", path: "/tmp/afile" }), byUrl), "set DATABASE_URL's sqlite: path");
  // A file in DATA_DIR's way (the emulator's folder, the secrets) is DATA_DIR's, even with DATABASE_URL set.
  assert.match(startupHint(enotdir("/srv/data"), byUrl), "set DATA_DIR to a folder");
  assert.not.match(startupHint(enotdir("/tmp/afilex"), byUrl), "DATABASE_URL", "a name that only starts the same is not the folder");
  assert.match(startupHint(enotdir("/srv/data"), { ...sqlite, sqlite: { file: "/srv/data/entity-versions.db", setting: "DATA_DIR" } }), "set DATA_DIR to a folder");
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

s("a database name with a quote or a backtick gives a command a shell runs as written, and a statement MySQL reads as that name", () => {
  for (const [url, name] of [
    ["mysql://root@127.0.0.1:3306/x%27y", "x'y"],
    ["mysql://root@127.0.0.1:3306/a%60b", "a`b"],
    ["mysql://root@127.0.0.1:3306/%27%60%27%5C%24(id)", "'`'\\$(id)"],
  ] as const) {
    const named = databaseHintSettings(loadDatabaseConfig({ DATABASE_URL: url }));
    assert.is(named.databaseName, name);
    const quoted = `\`${name.replaceAll("`", "``")}\``;
    // The command as given, run by a shell with printf in mysql's place: what mysql would be given.
    const command = /e\.g\. (mysql -e .*); the service creates/.exec(startupHint(failure("ER_BAD_DB_ERROR"), { ...settings, ...named }))?.[1];
    assert.ok(command !== undefined);
    const run = spawnSync("sh", ["-c", command!.replace(/^mysql -e /, "printf %s ")], { encoding: "utf8" });
    assert.is(run.status, 0, run.stderr);
    assert.is(run.stdout, `CREATE DATABASE ${quoted}`);
    assert.match(startupHint(failure("ER_DBACCESS_DENIED_ERROR"), { ...settings, ...named }), `GRANT ALL ON ${quoted}.* TO`);
  }
});

s.run();

// Clears the migration lock a process stopped mid-migration left behind:
//   npm run migrate:unlock
// Connects with DATABASE_URL (or, without it, DATA_DIR's SQLite file) as
// the service does, TLS settings included.
import fs from "node:fs";
import { ConfigError, type DatabaseConfig, loadDatabaseConfig } from "../config.js";
import { databaseHintSettings, messageWithCauses, startupHint } from "../ops/startup-hint.js";
import { openDatabase } from "../store/database.js";
import { freeMigrationLock } from "../store/migrate.js";

if (process.argv.slice(2).some((arg) => arg === "--help" || arg === "-h")) {
  process.stdout.write(
    "npm run migrate:unlock: clears the migration lock a start killed mid-migration left behind, in the database the service would use\n" +
      "(DATABASE_URL; without it, the SQLite file under DATA_DIR, ./data by default): run it with the service's own settings.\n" +
      "On MySQL a start clears such a lock by itself; run it only when no other process is starting on the database.\n",
  );
  process.exit(0);
}

let config: DatabaseConfig | undefined;
try {
  config = loadDatabaseConfig();
  // A typo in DATA_DIR would make a new, empty database here and call it clear.
  if (config.kind === "sqlite" && !fs.existsSync(config.file)) {
    throw new ConfigError(`there is no database at ${config.file}: run this with the DATA_DIR (or DATABASE_URL) the service runs with.`);
  }
  // Knex's own stack of a failed connection: the error line below says it.
  const db = openDatabase(config, { warn: () => undefined, error: () => undefined });
  try {
    // A DATABASE_URL naming another database (or one the service never
    // started on) has no lock to clear: making Knex's tables in it and
    // calling it clear would send the operator to start on the wrong one.
    if (!(await db.knex.schema.hasTable("knex_migrations"))) {
      throw new ConfigError(
        `${config.kind === "mysql" ? "DATABASE_URL's database" : config.file} has no migrations table: the service has never started on it, so it holds no lock. Run this with the DATABASE_URL (or DATA_DIR) the service runs with; nothing was changed.`,
      );
    }
    await freeMigrationLock(db.knex);
  } finally {
    await db.knex.destroy();
  }
  process.stdout.write(`migrate:unlock: the migration lock of ${config.kind === "mysql" ? "DATABASE_URL's database" : config.file} is clear; start the service.\n`);
} catch (error) {
  const hint = config === undefined ? "" : startupHint(error, { host: "127.0.0.1", port: 0, ...databaseHintSettings(config) });
  process.stderr.write(`migrate:unlock: ${messageWithCauses(error)}${hint}\n`);
  process.exit(error instanceof ConfigError ? 2 : 1);
}

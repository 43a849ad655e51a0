// Clears the migration lock a process stopped mid-migration left behind:
//   npm run migrate:unlock
// Connects with DATABASE_URL as the service does, TLS settings included.
import { ConfigError, loadDatabaseConfig } from "../config.js";
import { openDatabase } from "../store/database.js";
import { freeMigrationLock } from "../store/migrate.js";

try {
  const config = loadDatabaseConfig();
  const db = openDatabase(config);
  try {
    await freeMigrationLock(db.knex);
  } finally {
    await db.knex.destroy();
  }
  process.stdout.write(`migrate:unlock: the migration lock of ${config.kind === "mysql" ? "DATABASE_URL's database" : config.file} is clear; start the service.\n`);
} catch (error) {
  process.stderr.write(`migrate:unlock: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(error instanceof ConfigError ? 2 : 1);
}

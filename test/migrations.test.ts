// Migrations that change data, run on both databases: what a database
// upgraded from an earlier release holds afterwards.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import knexFactory, { type Knex } from "knex";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { startupHint } from "../src/ops/startup-hint.js";
import { openDatabase } from "../src/store/database.js";
import { migrateLatest } from "../src/store/migrate.js";
import { versionDataCost } from "../src/domain/version-data-cost.js";
import * as migration0008 from "../src/store/migrations/0008-version-data-cost.js";
import * as migration0013 from "../src/store/migrations/0013-upload-issuer.js";
import { VersionStore } from "../src/store/version-store.js";
import { type Backend, connectTestDatabase, createTestDatabase, mysqlAvailable, type TestDatabase } from "./support/env.js";

function defineMigrationsSuite(backend: Backend): void {
  const s = suite(`${backend}: migrations`);

  /** Runs `use` on a new, empty database of the backend, dropped afterwards. */
  const onNewDatabase = async (use: (knex: Knex, tdb: TestDatabase) => Promise<void>): Promise<void> => {
    const tdb = await createTestDatabase(backend);
    const knex = connectTestDatabase(backend, tdb);
    try {
      await use(knex, tdb);
    } finally {
      await knex.destroy();
      await tdb.drop();
    }
  };

  s("0008 measures the versions recorded before it: what their package_json and service_dependencies cost to serve", async () =>
    onNewDatabase(async (knex) => {
      await migrateLatest(knex);
      // As the release before 0008 left them: no data_cost.
      await migration0008.down(knex);
      await knex("entities").insert({ id: "e", last_seq: 2, created_at: new Date() });
      const row = (seq: number, dependencies: string, packageJson: string | null) => ({
        id: `v${seq}`,
        entity_id: "e",
        seq,
        version: `2020.01.01-${String(seq).padStart(6, "0")}`,
        source_hash: "c".repeat(64),
        upload_id: `u${seq}`,
        storage_path: `versions/e/v${seq}/package`,
        file_size_bytes: 1,
        service_dependencies: dependencies,
        package_json: packageJson,
        published_by: "owner",
        created_at: new Date(),
      });
      // Multi-byte characters: counted in bytes, as stored.
      await knex("versions").insert([row(1, '["a","b"]', '{"name":"zoë ✓"}'), row(2, "[]", null)]);
      await migration0008.up(knex);
      const measured = await knex("versions").orderBy("seq").select("seq", "data_cost");
      // Bytes of text (multi-byte characters in bytes), and 64 for each JSON value.
      assert.equal(
        measured.map((m: { data_cost: number | string }) => Number(m.data_cost)),
        [Buffer.byteLength('["a","b"]') + Buffer.byteLength('{"name":"zoë ✓"}') + 64 * 4, 2],
      );
      assert.is(versionDataCost({ serviceDependencies: '["a","b"]', packageJson: '{"name":"zoë ✓"}' }, ["a", "b"], { name: "zoë ✓" }), Number(measured[0]!.data_cost), "as a confirm records it");

      // Stopped half-way (MySQL commits a schema change at once, and the
      // measuring as it goes): the column there, one version measured, no
      // index, nothing recorded. The next start finishes it.
      await migration0008.down(knex);
      await knex.schema.alterTable("versions", (t) => {
        t.integer("data_cost").notNullable().defaultTo(0);
      });
      await knex("versions").where("id", "v2").update({ data_cost: 2 });
      for (let from = 3; from < 1_004; from += 200) {
        await knex("versions").insert(Array.from({ length: Math.min(200, 1_004 - from) }, (_, i) => row(from + i, '["x"]', null)));
      }
      await migration0008.up(knex);
      await migration0008.up(knex);
      const costs = await knex("versions").select("id", "data_cost");
      const plain = versionDataCost({ serviceDependencies: '["x"]', packageJson: null }, ["x"], undefined);
      assert.is(costs.length, 1_003);
      assert.ok(
        costs.every((c: { id: string; data_cost: number | string }) => Number(c.data_cost) === (c.id === "v1" ? Number(measured[0]!.data_cost) : c.id === "v2" ? 2 : plain)),
        "every version measured once, each with its own cost",
      );
      await migration0008.down(knex);
    }));

  s("0013 records whom uploads are issued to: those issued before it count against no caller's MAX_OPEN_UPLOADS_PER_ENTITY, and a start stopped half-way finishes it", async () =>
    onNewDatabase(async (knex) => {
      await migrateLatest(knex);
      // As the release before 0013 left them: an open upload, issued to no one known.
      await migration0013.down(knex);
      await knex("uploads").insert({ id: "legacy", entity_id: "e", state: "issued", created_at: new Date(), attempts: 0 });
      // Stopped half-way: the column added, no index yet.
      await knex.schema.alterTable("uploads", (t) => {
        t.string("issued_to", 255).nullable();
      });
      await migration0013.up(knex);
      await migration0013.up(knex);
      assert.equal(await knex("uploads").select("id", "issued_to"), [{ id: "legacy", issued_to: null }]);
      const store = new VersionStore({ knex, dialect: backend, readBatchMax: 1, confirmGroupMax: 1, preparedStatements: false });
      assert.ok(await store.recordUpload("e", "u1", "alice", new Date(), 1), "the legacy upload is not alice's");
      assert.not.ok(await store.recordUpload("e", "u2", "alice", new Date(), 1), "her own is");
      assert.ok(await store.recordUpload("e", "u3", "bob", new Date(), 1), "nor bob's");
    }));

  s("a migration lock left by a process killed mid-migration: on SQLite the start fails saying what to run and npm run migrate:unlock clears it; on MySQL the next start, holding the database's own migration lock, clears it (saying so)", async () =>
    onNewDatabase(async (knex, tdb) => {
      await migrateLatest(knex);
      await knex("knex_migrations_lock").update({ is_locked: 1 });
      await knex("knex_migrations").where("name", "0010-open-uploads").del();
      const said: string[] = [];
      const failed = await migrateLatest(knex, 300, (m) => said.push(m)).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.is(said.length, 1, "said once, not at every attempt");
      if (backend === "mysql") {
        assert.is(failed, undefined);
        assert.match(said[0]!, "left the migration lock set");
      } else {
        assert.instance(failed, Error);
        assert.match(startupHint(failed, { host: "127.0.0.1", port: 8080, databaseKind: backend }), "npm run migrate:unlock");
        const unlocked = spawnSync(process.execPath, ["--import", "tsx", "src/tools/migrate-unlock.ts"], {
          env: { PATH: process.env["PATH"] ?? "", DATABASE_URL: tdb.url },
          encoding: "utf8",
        });
        assert.is(unlocked.status, 0, unlocked.stderr);
        assert.match(unlocked.stdout, "the migration lock");
        // A DATA_DIR with a typo would have been given a new, empty database, and called clear.
        const typo = path.join(os.tmpdir(), `ev-no-such-dir-${process.pid}`);
        const refused = spawnSync(process.execPath, ["--import", "tsx", "src/tools/migrate-unlock.ts"], { env: { PATH: process.env["PATH"] ?? "", DATA_DIR: typo }, encoding: "utf8" });
        assert.is(refused.status, 2, refused.stderr);
        assert.match(refused.stderr, `there is no database at ${typo}`);
        assert.not.ok(fs.existsSync(typo));
        await migrateLatest(knex, 300);
      }
      assert.equal((await knex("knex_migrations_lock").select("is_locked")).map((r: { is_locked: number }) => Number(r.is_locked)), [0]);
      assert.ok((await knex("knex_migrations").where("name", "0010-open-uploads").first()) !== undefined);
    }));

  s("npm run migrate:unlock refuses a database the service never started on (a DATABASE_URL naming another), and writes nothing to it", async () =>
    onNewDatabase(async (knex, tdb) => {
      await knex.raw("select 1");
      const refused = spawnSync(process.execPath, ["--import", "tsx", "src/tools/migrate-unlock.ts"], {
        env: { PATH: process.env["PATH"] ?? "", DATABASE_URL: tdb.url },
        encoding: "utf8",
      });
      assert.is(refused.status, 2, refused.stderr);
      assert.match(refused.stderr, "has no migrations table: the service has never started on it");
      assert.not.ok(await knex.schema.hasTable("knex_migrations_lock"), "no table made");
    }));

  if (backend === "mysql") {
    s("a process whose migration lock is lost (its connection killed) stops before its next migration", async () => {
      const tdb = await createTestDatabase(backend);
      const knex = connectTestDatabase(backend, tdb);
      const admin = knexFactory({ client: "mysql2", connection: tdb.url, pool: { min: 0, max: 1 } });
      try {
        await migrateLatest(knex);
        await knex("knex_migrations").whereIn("name", ["0009-upload-activated", "0010-open-uploads"]).del();
        await admin.raw("select 1");
        let killed = false;
        // As the first pending migration is recorded, its holder's lock session is killed.
        const killLockSessionOnRecord = () => {
          killed = false;
          knex.on("query", (q: { sql: string }) => {
            if (killed || !/^insert into `knex_migrations`/.test(q.sql)) return;
            killed = true;
            void admin.raw("SELECT IS_USED_LOCK(CONCAT('entity-versions-migrate-', LEFT(SHA1(DATABASE()), 32))) AS id").then((r: unknown) => {
              const id = (r as [Array<{ id: number | null }>])[0][0]!.id;
              return id === null ? undefined : admin.raw(`KILL ${Number(id)}`);
            });
          });
        };
        killLockSessionOnRecord();
        const failed = await migrateLatest(knex).then(
          () => undefined,
          (error: unknown) => error,
        );
        knex.removeAllListeners("query");
        assert.ok(killed);
        assert.instance(failed, Error);
        assert.match((failed as Error).message, "migration lock was lost", "said as such, not as the ROLLBACK that failed after it");
        const done = (await knex("knex_migrations").select("name")).map((r: { name: string }) => r.name);
        assert.ok(done.includes("0009-upload-activated"), "the migration under way when it was lost finished");
        assert.not.ok(done.includes("0010-open-uploads"), "none after it");
        await migrateLatest(knex);
        // Lost during the last migration: every one ran, and the start goes on.
        await knex("knex_migrations").where("name", "0011-database-identity").del();
        killLockSessionOnRecord();
        await migrateLatest(knex);
        knex.removeAllListeners("query");
        assert.ok(killed);
      } finally {
        await admin.destroy();
        await knex.destroy();
        await tdb.drop();
      }
    });

    s("a process migrating holds the others back for as long as it runs, past any fixed wait, and they say so once", async () => {
      const tdb = await createTestDatabase(backend);
      const knex = connectTestDatabase(backend, tdb);
      // Another process's session holding the database's migration lock.
      const other = knexFactory({ client: "mysql2", connection: tdb.url, pool: { min: 1, max: 1 } });
      try {
        const got = (await other.raw("SELECT GET_LOCK(CONCAT('entity-versions-migrate-', LEFT(SHA1(DATABASE()), 32)), 0) AS got")) as unknown as [Array<{ got: number }>];
        assert.is(Number(got[0][0]!.got), 1);
        const said: string[] = [];
        const started = Date.now();
        const migrating = migrateLatest(knex, 300, (m) => said.push(m));
        await new Promise((resolve) => setTimeout(resolve, 2_500));
        assert.not.ok(await knex.schema.hasTable("entities"), "nothing migrated while the other holds the lock");
        await other.destroy();
        await migrating;
        assert.ok(Date.now() - started >= 2_500);
        assert.equal(said, ["another process is migrating this database; waiting for it to finish"]);
        assert.ok(await knex.schema.hasColumn("uploads", "activated_version_id"));
      } finally {
        await other.destroy();
        await knex.destroy();
        await tdb.drop();
      }
    });
  }

  s("every migration runs again over its own work left part-done (MySQL commits each schema statement as it goes), giving the schema a fresh database gets", async () => {
    const fresh = await createTestDatabase(backend);
    const tdb = await createTestDatabase(backend);
    const freshKnex = connectTestDatabase(backend, fresh);
    const knex = connectTestDatabase(backend, tdb);
    const schema = async (k: Knex) => {
      const lines: string[] = [];
      if (backend === "mysql") {
        const [tables] = (await k.raw("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name NOT LIKE 'knex%'")) as unknown as [Array<{ t: string }>];
        for (const { t } of tables) {
          const [[created]] = (await k.raw(`SHOW CREATE TABLE \`${t}\``)) as unknown as [[Record<string, string>]];
          lines.push(...created!["Create Table"]!.split("\n").map((l) => `${t}: ${l.trim().replace(/,$/, "").replace(/ AUTO_INCREMENT=\d+/, "")}`));
        }
      } else {
        const rows = (await k.raw("SELECT tbl_name AS t, sql FROM sqlite_master WHERE sql IS NOT NULL AND tbl_name NOT LIKE 'knex%'")) as Array<{ t: string; sql: string }>;
        lines.push(...rows.map((r) => `${r.t}: ${r.sql}`));
      }
      return lines.sort();
    };
    try {
      await migrateLatest(freshKnex);
      await migrateLatest(knex);
      // As a first start killed part-way through 0001 would leave it,
      // seen through all that came after: a table missing, another without
      // its unique keys, Knex's lock set, nothing recorded.
      await knex.schema.dropTable("uploads");
      await knex.schema.alterTable("versions", (t) => {
        t.dropUnique(["entity_id", "seq"]);
        t.dropUnique(["upload_id"]);
      });
      await knex("knex_migrations").del();
      await knex("knex_migrations_lock").update({ is_locked: 1 });
      if (backend === "sqlite") await knex("knex_migrations_lock").update({ is_locked: 0 });
      await migrateLatest(knex, 300);
      assert.equal(await schema(knex), await schema(freshKnex));
      assert.is((await knex("knex_migrations").select("name")).length, (await freshKnex("knex_migrations").select("name")).length);
    } finally {
      await knex.destroy();
      await freshKnex.destroy();
      await tdb.drop();
      await fresh.drop();
    }
  });

  s("a database an early build migrated with 0008-version-data-bytes (since withdrawn) is taken back and migrated on, not refused as corrupt", async () =>
    onNewDatabase(async (knex) => {
      await migrateLatest(knex);
      await knex("entities").insert({ id: "e", last_seq: 1, created_at: new Date() });
      await knex("versions").insert({
        id: "v1", entity_id: "e", seq: 1, version: "2020.01.01-000001", source_hash: "c".repeat(64), upload_id: "u1",
        storage_path: "versions/e/v1/package", file_size_bytes: 1, service_dependencies: '["a"]', package_json: null, published_by: "owner", created_at: new Date(),
      });
      // As that build left it: its column and index, its record, no 0008-version-data-cost.
      await migration0008.down(knex);
      await knex.schema.alterTable("versions", (t) => t.integer("data_bytes").notNullable().defaultTo(0));
      await knex.schema.alterTable("versions", (t) => t.index(["entity_id", "seq", "data_bytes"], "versions_entity_id_seq_data_bytes_index"));
      await knex("knex_migrations").where("name", "0008-version-data-cost").update({ name: "0008-version-data-bytes" });
      await migrateLatest(knex, 300);
      assert.not.ok(await knex.schema.hasColumn("versions", "data_bytes"));
      assert.ok(Number((await knex("versions").where("id", "v1").first("data_cost")).data_cost) > 0, "measured by the migration in its place");
      const names = (await knex("knex_migrations").select("name")).map((r: { name: string }) => r.name);
      assert.ok(names.includes("0008-version-data-cost") && !names.includes("0008-version-data-bytes"), names.join(", "));
    }));

  s("a start whose next migration another process ran meanwhile (Knex then runs nothing) goes on with the rest, never serving on a half-migrated schema", async () =>
    onNewDatabase(async (knex) => {
      let calls = 0;
      // The second step finds its migration run by "another replica" between
      // Knex's choice of it and its lock, and so runs nothing itself.
      const racing = new Proxy(knex, {
        get(target, key, receiver) {
          if (key !== "migrate") return Reflect.get(target, key, receiver) as unknown;
          const real = target.migrate;
          return {
            up: async (config: Knex.MigratorConfig) => {
              if (++calls !== 2) return real.up(config);
              await real.up(config);
              return [0, []];
            },
            list: (config: Knex.MigratorConfig) => real.list(config),
          };
        },
      });
      await migrateLatest(racing, 300);
      assert.ok(calls > 2, "it went on after the step that ran nothing");
      assert.ok(await knex.schema.hasColumn("uploads", "activated_version_id"), "every migration ran");
    }));

  s("a stop asked for during the migrations is taken between two of them: the lock is free, and the next start goes on from there", async () =>
    onNewDatabase(async (knex) => {
      const stop = new AbortController();
      const reason = new Error("SIGTERM");
      // Asked while the first migration runs (its first table).
      knex.on("query", (q: { sql: string }) => {
        if (/create table [`"]?entities[`"]?/i.test(q.sql)) stop.abort(reason);
      });
      const stopped = await migrateLatest(knex, 300, undefined, stop.signal).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.is(stopped, reason);
      const done = (await knex("knex_migrations").select("name")).map((r: { name: string }) => r.name);
      assert.equal(done, ["0001-init"], "the migration under way finished; none started after the stop");
      assert.equal((await knex("knex_migrations_lock").select("is_locked")).map((r: { is_locked: number }) => Number(r.is_locked)), [0]);
      knex.removeAllListeners("query");
      await migrateLatest(knex, 300);
      assert.ok((await knex("knex_migrations").count<Array<{ n: number }>>({ n: "*" }))[0]!.n > 1);
      assert.ok(await knex.schema.hasColumn("uploads", "activated_version_id"), "every migration ran");
    }));

  s.run();
}

const logged = suite("migrations: the wait for another process's lock in the service's log");

logged("said once, by the service, with its own advice: none of Knex's lines that tell to run knex migrate:unlock", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-migrate-log-"));
  const lines: string[] = [];
  const db = openDatabase({ kind: "sqlite", file: path.join(dir, "db.sqlite") }, { warn: (obj, msg) => lines.push(`${msg} ${JSON.stringify(obj)}`), error: (obj, msg) => lines.push(`${msg} ${JSON.stringify(obj)}`) }, { migrations: true });
  try {
    await migrateLatest(db.knex);
    await db.knex("knex_migrations_lock").update({ is_locked: 1 });
    // A pending migration, so that Knex asks for the lock.
    await db.knex("knex_migrations").where("name", "0010-open-uploads").del();
    await migrateLatest(db.knex, 300, (m) => lines.push(m)).catch(() => undefined);
    assert.ok(lines.length >= 1, "the wait is said");
    assert.equal(lines.filter((l) => l.includes("migrate:unlock") && !l.includes("npm run migrate:unlock")), [], lines.join("\n"));
    assert.is(lines.filter((l) => l.includes("npm run migrate:unlock")).length, 1, lines.join("\n"));
  } finally {
    await db.knex.destroy();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

logged("a SQLite file this process may not write fails the start at once, naming the file, rather than waiting out the lock's deadline", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-migrate-readonly-"));
  const file = path.join(dir, "entity-versions.db");
  try {
    const db = openDatabase({ kind: "sqlite", file }, undefined, { migrations: true });
    await migrateLatest(db.knex);
    // A pending migration, so that Knex asks for the lock (a write).
    await db.knex("knex_migrations").where("name", "0012-abandoned-uploads").del();
    await db.knex.destroy();
    fs.chmodSync(file, 0o444);
    // The folder stays writable: only the file refuses.
    fs.chmodSync(dir, 0o777);
    // Root writes whatever the mode says: the migrations run as nobody then.
    const asNobody = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {};
    const script = path.join(dir, "migrate.mts");
    const src = path.resolve("src");
    fs.writeFileSync(
      script,
      `import { openDatabase } from ${JSON.stringify(path.join(src, "store/database.ts"))};
import { migrateLatest } from ${JSON.stringify(path.join(src, "store/migrate.ts"))};
import { startupHint } from ${JSON.stringify(path.join(src, "ops/startup-hint.ts"))};
const db = openDatabase({ kind: "sqlite", file: ${JSON.stringify(file)} }, { warn: () => undefined, error: () => undefined }, { migrations: true });
const started = Date.now();
try {
  await migrateLatest(db.knex, 20_000);
  console.log(JSON.stringify({ migrated: true }));
} catch (error) {
  console.log(JSON.stringify({ ms: Date.now() - started, message: error.message, hint: startupHint(error, { host: "127.0.0.1", port: 0, databaseKind: "sqlite", sqlite: { file: ${JSON.stringify(file)}, setting: "DATA_DIR" } }) }));
} finally {
  await db.knex.destroy();
}
`,
    );
    const child = spawnSync(process.execPath, ["--import", "tsx", script], { encoding: "utf8", timeout: 60_000, env: { PATH: process.env["PATH"] ?? "", HOME: dir }, ...asNobody });
    if (child.status !== 0 && /EACCES|ERR_MODULE_NOT_FOUND/.test(child.stderr)) {
      console.log("(skipped: user nobody may not read this checkout, so no SQLite file can be read-only to the test)");
      return;
    }
    assert.is(child.status, 0, child.stderr);
    const result = JSON.parse(child.stdout.trim().split("\n").pop()!) as { migrated?: boolean; ms: number; message: string; hint: string };
    assert.not.ok(result.migrated, "the file is read-only to this process");
    assert.match(result.message, "readonly database");
    assert.ok(result.ms < 5_000, `failed after ${result.ms} ms: a read-only file is not a lock to wait for`);
    assert.is(result.hint, ` (this user may not write ${file}: let it write the file and its folder, or set DATA_DIR to a folder it may write)`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

logged.run();

defineMigrationsSuite("sqlite");
if (await mysqlAvailable()) defineMigrationsSuite("mysql");

import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ConfigError, loadConfig, loadDatabaseConfig } from "../../src/config.js";

/** A file that exists wherever the tests run (this one), for settings that must name a file. */
const anyFile = fileURLToPath(import.meta.url);

/** A production configuration as the README documents it: JWKS auth, MySQL with TLS, Azure Storage. */
const productionEnv = Object.freeze({
  NODE_ENV: "production",
  DATABASE_URL: "mysql://u:p@db:3306/versions?ssl-mode=VERIFY_IDENTITY",
  AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
  PAGE_TOKEN_SECRET: "Hk4Qw8Zr2Nv6Tc1Lm9Xb5Pj3Fs7Dg0Ya+page",
  AUTH_JWKS_URL: "https://login.example.com/jwks.json",
  AUTH_ISSUER: "https://login.example.com/",
  AUTH_AUDIENCE: "entity-versions",
});

test("no configuration runs on the embedded defaults under ./data", () => {
  const c = loadConfig({});
  assert.is(c.port, 8080);
  assert.is(c.database.kind, "sqlite");
  assert.ok(c.database.kind === "sqlite" && c.database.file.endsWith("data/entity-versions.db"));
  assert.is(c.blob.kind, "embedded-azurite");
  assert.is(c.blob.container, "entity-versions");
  assert.is(c.uploadUrlTtlSeconds, 900);
  assert.is(c.downloadUrlTtlSeconds, 300);
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.limits) && Object.isFrozen(c.http));
  assert.is(c.host, "127.0.0.1", "development serves this machine only");
  assert.is(c.http.maxConcurrentStreams, 100);
  assert.is(c.auth.maxTokenLifetimeSeconds, undefined, "no lifetime bound outside production unless set");
  assert.is(c.rpcInflationScope, "compressed");
  assert.is(loadConfig({ RPC_INFLATION_SCOPE: " All " }).rpcInflationScope, "all");
});

test("production listens everywhere and bounds token lifetimes by default", () => {
  const c = loadConfig(productionEnv);
  assert.is(c.host, "0.0.0.0");
  assert.is(c.auth.maxTokenLifetimeSeconds, 24 * 3600);
  assert.is(loadConfig({ NODE_ENV: "test" }).production, false);
  assert.is(loadConfig({ NODE_ENV: "development", AUTH_MAX_TOKEN_LIFETIME: "600" }).auth.maxTokenLifetimeSeconds, 600);
});

test("production refuses weak settings, each with a message naming the variable", () => {
  const good = {
    NODE_ENV: "production",
    DATABASE_URL: "mysql://u:p@db:3306/versions?ssl-mode=VERIFY_IDENTITY",
    AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
    PAGE_TOKEN_SECRET: "Hk4Qw8Zr2Nv6Tc1Lm9Xb5Pj3Fs7Dg0Ya+page",
    AUTH_JWT_SECRET: "Zq3x9Lr7Tb2Wm5Kc8Hf1Jd4Gs6Pn0Vy+/AbCdEfGh=",
  };
  assert.is(loadConfig(good).production, true);
  // Behind a load balancer a stopping replica serves on for a few seconds, not ready; a developer's stops at once.
  assert.equal([loadConfig(good).shutdownDrainMs, loadConfig({}).shutdownDrainMs], [5_000, 0]);
  const azurite = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=https://blob.example.com/devstoreaccount1;";
  const cases: Array<[Record<string, string>, string]> = [
    [{ AUTH_JWT_SECRET: "a".repeat(32) }, "AUTH_JWT_SECRET"],
    [{ AUTH_JWT_SECRET: "secretsecretsecretsecretsecretsecret" }, "AUTH_JWT_SECRET"],
    [{ AUTH_MAX_TOKEN_LIFETIME: "0" }, "AUTH_MAX_TOKEN_LIFETIME"],
    [{ AUTH_CLOCK_SKEW_SECONDS: "600" }, "AUTH_CLOCK_SKEW_SECONDS"],
    [{ AZURE_STORAGE_CONNECTION_STRING: azurite }, "development key"],
    [{ AZURE_STORAGE_CONNECTION_STRING: azurite.replace("==;", ";").replace("DefaultEndpointsProtocol=http", "DefaultEndpointsProtocol=https") }, "development key"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;blobendpoint=https://x.example/acct;BlobEndpoint=http://10.0.0.5/acct" }, "https"],
    [{ AUTH_JWT_SECRET: "abcdefgh".repeat(4) }, "AUTH_JWT_SECRET"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net" }, "https"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;BlobEndpoint=http://10.0.0.5:10000/acct" }, "https"],
    [{ PAGE_TOKEN_SECRET: "a".repeat(36) }, "random PAGE_TOKEN_SECRET"],
    [{ PAGE_TOKEN_SECRET: "abcd".repeat(9) }, "random PAGE_TOKEN_SECRET"],
    // Typed, though neither one character nor one string repeated.
    [{ AUTH_JWT_SECRET: "passwordpassword1234567890123456" }, "random AUTH_JWT_SECRET"],
    [{ PAGE_TOKEN_SECRET: "abcdefghabcdefghabcdefghabcdefgx" }, "random PAGE_TOKEN_SECRET"],
    // The JWT key, shared: whoever holds the page-token secret could sign tokens.
    [{ PAGE_TOKEN_SECRET: good.AUTH_JWT_SECRET }, "PAGE_TOKEN_SECRET other than AUTH_JWT_SECRET"],
    [{ PAGE_TOKEN_SECRET: ` ${good.AUTH_JWT_SECRET}\n` }, "PAGE_TOKEN_SECRET other than AUTH_JWT_SECRET"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=https://10.0.0.5;AccountName=acct;AccountKey=c29tZXRoaW5nZWxzZQ==" }, "UseDevelopmentStorage"],
    [{ ORPHAN_GRACE_SECONDS: "600" }, "ORPHAN_GRACE_SECONDS"],
    [{ UPLOAD_URL_TTL_SECONDS: "86400" }, "ORPHAN_GRACE_SECONDS"],
    // A key withdrawn from the JWKS would verify for a day; anyone could make it fetch the JWKS at will.
    [{ AUTH_JWKS_MAX_AGE_SECONDS: "86400" }, "AUTH_JWKS_MAX_AGE_SECONDS"],
    [{ AUTH_TOKEN_CACHE_SECONDS: "3600" }, "AUTH_TOKEN_CACHE_SECONDS"],
    [{ AUTH_JWKS_COOLDOWN_SECONDS: "0" }, "AUTH_JWKS_COOLDOWN_SECONDS"],
    // A download URL outlives its holder's access.
    [{ DOWNLOAD_URL_TTL_SECONDS: String(7 * 24 * 3600) }, "at most 3600 s of DOWNLOAD_URL_TTL_SECONDS"],
    [{ DATABASE_URL: "mysql://root@db:3306/versions?ssl-mode=VERIFY_IDENTITY" }, "password in DATABASE_URL"],
    // The database says what each version downloads: a link in the clear, or to whoever answers, could change it.
    [{ DATABASE_URL: "mysql://u:p@db:3306/versions" }, "needs TLS to a MySQL on another host (db): add ?ssl-mode=VERIFY_IDENTITY"],
    [{ DATABASE_URL: "mysql://u:p@10.0.0.7:3306/versions?ssl-mode=required" }, "ssl-mode=REQUIRED: it encrypts but checks no certificate"],
    // A per-caller share as large as the whole: one caller could take every place.
    [{ HTTP_MAX_CALLS_PER_CALLER: "1000" }, "HTTP_MAX_CALLS_PER_CALLER (1000) below HTTP_MAX_CALLS_IN_FLIGHT (1000)"],
    [{ WATCH_MAX_PER_CALLER: "5000", WATCH_MAX_PER_PROCESS: "5000" }, "WATCH_MAX_PER_CALLER (5000) below WATCH_MAX_PER_PROCESS (5000)"],
  ];
  // A link that never leaves the machine (a local proxy doing the TLS), or one said to be protected another way.
  for (const url of ["mysql://u:p@127.0.0.1:3306/versions", "mysql://u:p@localhost/versions", "mysql://u:p@[::1]:3306/versions", "mysql://u:p@db/versions?ssl-mode=DISABLED", `mysql://u:p@db/versions?ssl-mode=VERIFY_CA&ssl-ca=${anyFile}`]) {
    assert.is(loadConfig({ ...good, DATABASE_URL: url }).production, true, url);
  }
  for (const [change, name] of cases) {
    try {
      loadConfig({ ...good, ...change });
      assert.unreachable(`${JSON.stringify(change)} was accepted`);
    } catch (error) {
      assert.instance(error, ConfigError);
      assert.match((error as Error).message, name);
    }
    // Outside production the same values are the operator's (or a test's) business.
    const { NODE_ENV: _production, ...development } = { ...good, ...change };
    assert.is(loadConfig(development).production, false, JSON.stringify(change));
  }
});

test("production names every setting to fix in one start: the sweep's grace too when another HTTP setting is wrong", () => {
  for (const other of [{ HTTP_MAX_CALLS_PER_CALLER: "5000" }, { HTTP2_MAX_CONCURRENT_STREAMS: "abc" }]) {
    const error = (() => {
      try {
        loadConfig({ ...productionEnv, ...other, ORPHAN_GRACE_SECONDS: "60" });
        return undefined;
      } catch (caught) {
        return caught;
      }
    })();
    assert.instance(error, ConfigError);
    assert.match((error as Error).message, Object.keys(other)[0]!);
    assert.match((error as Error).message, "ORPHAN_GRACE_SECONDS (60)");
  }
});

test("a JWKS is fetched again after AUTH_JWKS_MAX_AGE_SECONDS (60 by default): how soon a withdrawn key stops verifying", () => {
  assert.is(loadConfig({}).auth.jwksMaxAgeSeconds, 60);
  assert.is(loadConfig({ AUTH_JWKS_MAX_AGE_SECONDS: "5" }).auth.jwksMaxAgeSeconds, 5);
  assert.throws(() => loadConfig({ AUTH_JWKS_MAX_AGE_SECONDS: "0" }), /AUTH_JWKS_MAX_AGE_SECONDS/);
});

test("DATABASE_URL's ssl-mode and ssl-ca set TLS to MySQL, as MySQL's clients name them; without them, none", () => {
  const tls = (url: string) => {
    const db = loadConfig({ DATABASE_URL: url }).database;
    return db.kind === "mysql" ? db.tls : "sqlite";
  };
  assert.is(tls("mysql://u:p@db/x"), undefined);
  assert.equal(tls("mysql://u:p@db/x?ssl-mode=VERIFY_IDENTITY"), { mode: "VERIFY_IDENTITY" });
  assert.equal(tls("mysql://u:p@db/x?ssl-mode=required"), { mode: "REQUIRED" });
  assert.equal(tls(`mysql://u:p@db/x?ssl-mode=VERIFY_CA&ssl-ca=${anyFile}`), { mode: "VERIFY_CA", caFile: anyFile });
  // A "?" or "@" after the host is the URL's own: no user, or an "@" in a CA file's path.
  assert.is(tls("mysql://db:3306/x?ssl-mode=DISABLED"), undefined);
  const atFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-ca-")), "a@b.pem");
  fs.writeFileSync(atFile, "");
  assert.equal(tls(`mysql://u:p@db:3306/x?ssl-mode=VERIFY_IDENTITY&ssl-ca=${atFile}`), { mode: "VERIFY_IDENTITY", caFile: atFile });
  assert.is(tls("mysql://u:p@db/x?ssl-mode=DISABLED"), undefined);
});

test("MySQL and Azure come from DATABASE_URL and AZURE_STORAGE_CONNECTION_STRING", () => {
  const c = loadConfig({
    DATABASE_URL: "mysql://u:p@db:3306/versions?ssl-mode=VERIFY_IDENTITY",
    AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
  });
  assert.is(c.database.kind, "mysql");
  assert.ok(c.database.kind === "mysql" && c.database.readBatchMax === 16);
  assert.ok(c.database.kind === "mysql" && c.database.confirmGroupMax === 16);
  assert.is(c.blob.kind, "azure");
});

test("watches: polled every 500 ms, a bookmark after 15 s of quiet (below the idle timeout), bounded per process and per caller", () => {
  assert.equal(loadConfig({}).watch, { pollIntervalMs: 500, keepaliveMs: 15_000, maxPerProcess: 1000, maxPerCaller: 20 });
  assert.ok(Object.isFrozen(loadConfig({}).watch));
  // A short idle timeout brings the keep-alive below it.
  assert.is(loadConfig({ HTTP_IDLE_TIMEOUT_MS: "4000" }).watch.keepaliveMs, 2000);
  assert.equal(loadConfig({ WATCH_MAX_PER_CALLER: "100", WATCH_POLL_INTERVAL_MS: "250" }).watch.maxPerCaller, 100);
});

test("a bad value stops the start with a message naming the variable", () => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ PORT: "eighty" }, "PORT"],
    [{ PORT: "70000" }, "PORT"],
    [{ DATABASE_URL: "postgres://x/y" }, "DATABASE_URL"],
    [{ DATABASE_URL: "mysql://u:p@db:3306" }, "DATABASE_URL"],
    [{ DATABASE_URL: "sqlite:" }, "DATABASE_URL"],
    // Parameters the driver never saw were dropped unseen (a TLS setting above all).
    [{ DATABASE_URL: "mysql://u:p@db:3306/x?ssl=true" }, 'parameter "ssl" is not one this service reads'],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x?ssl-mode=ON" }, "ssl-mode"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x?ssl-mode=VERIFY_CA&ssl-ca=/no/such/ca.pem" }, "ssl-ca"],
    [{ DATABASE_URL: `mysql://u:p@db:3306/x?ssl-ca=${anyFile}` }, "checks no certificate"],
    [{ DATABASE_URL: `mysql://u:p@db:3306/x?ssl-mode=REQUIRED&ssl-ca=${anyFile}` }, "checks no certificate"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x?ssl-mode=VERIFY_CA&ssl-ca=/etc" }, "is not a file"],
    // Public CAs and no host-name check: any publicly certified server would pass.
    [{ DATABASE_URL: "mysql://u:p@db:3306/x?ssl-mode=VERIFY_CA" }, "VERIFY_CA needs ssl-ca"],
    [{ DATABASE_URL: "mysql://u:p#w@db:3306/x" }, "percent-encode"],
    [{ DATABASE_URL: "mysql://u:p@ss#w/rd@db:3306/x" }, '"#" is "%23"'],
    [{ DATABASE_URL: "mysql://u:p?w@db:3306/x" }, "percent-encoded"],
    [{ DATABASE_URL: "mysql://u:100%@db:3306/x" }, '"%" is "%25"'],
    [{ AZURE_STORAGE_CONTAINER: "Bad_Name" }, "AZURE_STORAGE_CONTAINER"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "UseDevelopmentStorage=true" }, "AZURE_STORAGE_CONNECTION_STRING"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "AccountName=acct;AccountKey=a2V5" }, "must say where the blobs are"],
    // Forms the Azure SDK refuses at start-up in words about some other part.
    [{ AZURE_STORAGE_CONNECTION_STRING: "BlobEndpoint=https://x.example/acct;AccountName=acct;AccountKey=a2V5" }, "must say where the blobs are"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "defaultendpointsprotocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net" }, "spelled exactly so"],
    [{ AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5" }, "EndpointSuffix"],
    [{ UPLOAD_URL_TTL_SECONDS: "1" }, "UPLOAD_URL_TTL_SECONDS"],
    [{ LOG_LEVEL: "loud" }, "LOG_LEVEL"],
    [{ RPC_INFLATION_SCOPE: "off" }, "RPC_INFLATION_SCOPE must be compressed or all"],
    [{ PAGE_MAX_BYTES: "1000" }, "PAGE_MAX_BYTES"],
    [{ MAX_PACKAGE_JSON_VALUES: "0" }, "MAX_PACKAGE_JSON_VALUES"],
    [{ PAGE_TOKEN_SECRET: "short" }, "PAGE_TOKEN_SECRET"],
    [{ AUTH_JWT_SECRET: "short" }, "AUTH_JWT_SECRET"],
    [{ AUTH_JWKS_URL: "ftp://keys" }, "AUTH_JWKS_URL"],
    [{ AUTH_CLOCK_SKEW_SECONDS: "-1" }, "AUTH_CLOCK_SKEW_SECONDS"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x", DATABASE_LOCK_WAIT_TIMEOUT_SECONDS: "0" }, "DATABASE_LOCK_WAIT_TIMEOUT_SECONDS"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x", DATABASE_POOL_MAX: "lots" }, "DATABASE_POOL_MAX"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x", DATABASE_READ_BATCH_MAX: "0" }, "DATABASE_READ_BATCH_MAX"],
    [{ DATABASE_URL: "mysql://u:p@db:3306/x", DATABASE_CONFIRM_GROUP_MAX: "65" }, "DATABASE_CONFIRM_GROUP_MAX"],
    [{ ORPHAN_GRACE_SECONDS: "0" }, "ORPHAN_GRACE_SECONDS"],
    [{ MAX_REQUEST_BYTES: "10" }, "MAX_REQUEST_BYTES"],
    [{ SHUTDOWN_TIMEOUT_MS: "1h" }, "SHUTDOWN_TIMEOUT_MS"],
    [{ NODE_ENV: "Production" }, "NODE_ENV"],
    [{ NODE_ENV: "staging" }, "NODE_ENV"],
    [{ HTTP2_MAX_CONCURRENT_STREAMS: "0" }, "HTTP2_MAX_CONCURRENT_STREAMS"],
    [{ MAX_REQUEST_BYTES: "2097152", MAX_CONNECTION_BUFFERED_BYTES: "1048576" }, "MAX_CONNECTION_BUFFERED_BYTES"],
    [{ REQUEST_DEADLINE_MS: "5" }, "REQUEST_DEADLINE_MS"],
    [{ WATCH_KEEPALIVE_MS: "65000" }, "WATCH_KEEPALIVE_MS"],
    [{ HTTP_IDLE_TIMEOUT_MS: "10000", WATCH_KEEPALIVE_MS: "10000" }, "WATCH_KEEPALIVE_MS"],
    [{ WATCH_POLL_INTERVAL_MS: "0" }, "WATCH_POLL_INTERVAL_MS"],
    [{ WATCH_MAX_PER_PROCESS: "0" }, "WATCH_MAX_PER_PROCESS"],
    [{ WATCH_MAX_PER_CALLER: "many" }, "WATCH_MAX_PER_CALLER"],
    // Past what MySQL's columns hold.
    [{ MAX_SERVICE_DEPENDENCIES: "993" }, "MAX_SERVICE_DEPENDENCIES"],
    [{ MAX_PACKAGE_JSON_BYTES: "16777216" }, "MAX_PACKAGE_JSON_BYTES"],
  ];
  for (const [env, name] of cases) {
    try {
      loadConfig(env);
      assert.unreachable(`${JSON.stringify(env)} was accepted`);
    } catch (error) {
      assert.instance(error, ConfigError);
      assert.match((error as Error).message, name);
    }
  }
});

test("every problem is named at once, each with what to set", () => {
  const refused = refusal;
  const bare = refused({ NODE_ENV: "production" });
  assert.match(bare, /^2 settings need fixing:/);
  assert.match(bare, "DATABASE_URL (mysql://user:password@host:3306/database), and AZURE_STORAGE_CONNECTION_STRING (");
  assert.match(bare, "PAGE_TOKEN_SECRET (32 or more random characters");
  assert.match(bare, "AUTH_JWT_SECRET or AUTH_JWKS_URL");
  const typos = refused({ PORT: "abc", LOG_LEVEL: "loud", DATABASE_PREPARED_STATEMENTS: "yes" });
  assert.match(typos, /^3 settings need fixing:/);
  for (const name of ["PORT", "LOG_LEVEL", "DATABASE_PREPARED_STATEMENTS"]) assert.match(typos, name);
  assert.match(refused({ DATABASE_READ_BATCH_MAX: "0" }), "DATABASE_READ_BATCH_MAX", "a MySQL setting is checked on SQLite too");
  // Several problems within one part (the blob store, the auth settings) are each named too.
  const production = {
    NODE_ENV: "production",
    DATABASE_URL: "mysql://u:p@db:3306/versions?ssl-mode=VERIFY_IDENTITY",
    PAGE_TOKEN_SECRET: "Hk4Qw8Zr2Nv6Tc1Lm9Xb5Pj3Fs7Dg0Ya+page",
    AZURE_STORAGE_CONNECTION_STRING:
      "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
    AUTH_JWKS_URL: "http://idp.example/keys",
  };
  const several = refused(production);
  assert.match(several, /^4 settings need fixing:/);
  for (const part of ["development key", "https blob endpoint", "https:// AUTH_JWKS_URL", "AUTH_ISSUER and AUTH_AUDIENCE"]) assert.match(several, part);
  // Several bad numbers in one group of settings (HTTP, the pool, the limits, watches), each named at once.
  const numbers = {
    HTTP2_MAX_CONCURRENT_STREAMS: "0",
    HTTP_MAX_CONNECTIONS: "-5",
    DATABASE_POOL_MAX: "0",
    DATABASE_STATEMENT_TIMEOUT_MS: "1",
    MAX_PACKAGE_BYTES: "999999999999",
    MAX_ACCESS_ENTRIES: "0",
    WATCH_MAX_PER_CALLER: "0",
    WATCH_POLL_INTERVAL_MS: "1",
  };
  const grouped = refused(numbers);
  assert.match(grouped, /^8 settings need fixing:/);
  for (const name of Object.keys(numbers)) assert.match(grouped, name);
  // A check across settings never names a value nobody set: one it cannot read is skipped.
  const besides = refused({ HTTP_IDLE_TIMEOUT_MS: "120000", WATCH_KEEPALIVE_MS: "90000", HTTP_MAX_CONNECTIONS: "-5" });
  assert.not.match(besides, "WATCH_KEEPALIVE_MS", besides);
  const crossed = refused({ ...production, AZURE_STORAGE_CONNECTION_STRING: undefined as unknown as string, AUTH_JWKS_URL: undefined as unknown as string, HTTP_MAX_CALLS_IN_FLIGHT: "2k", HTTP_MAX_CALLS_PER_CALLER: "1500" });
  assert.match(crossed, "HTTP_MAX_CALLS_IN_FLIGHT must be a whole number");
  assert.not.match(crossed, "below HTTP_MAX_CALLS_IN_FLIGHT (1000)", crossed);
  assert.not.match(refused({ MAX_REQUEST_BYTES: "huge", MAX_CONNECTION_BUFFERED_BYTES: "2048" }), "must hold");
});

test("a variable named like a setting but not one (another unit, a typo) is said at the start, and refused in production when only the unit differs", () => {
  const dev = loadConfig({ AUTH_MAX_TOKEN_LIFETIME_SECONDS: "3600", REQUEST_DEADLINE_SECONDS: "5", AZURE_STORAGE_CONTAINR: "x", WATCH_MAX_PER_CALER: "3", PATH: "/usr/bin", HOME: "/root", ENTITY_VERSIONS_PORT: "tcp://10.0.0.1:8080" });
  assert.equal([...dev.notices].sort(), [
    "AUTH_MAX_TOKEN_LIFETIME_SECONDS is not a setting and is ignored: did you mean AUTH_MAX_TOKEN_LIFETIME?",
    "AZURE_STORAGE_CONTAINR is not a setting and is ignored: did you mean AZURE_STORAGE_CONTAINER?",
    "REQUEST_DEADLINE_SECONDS is not a setting and is ignored: did you mean REQUEST_DEADLINE_MS?",
    "WATCH_MAX_PER_CALER is not a setting and is ignored: did you mean WATCH_MAX_PER_CALLER?",
  ]);
  assert.equal(loadConfig({}).notices, [], "nothing set, nothing said");
  const production = productionEnv;
  assert.equal(loadConfig(production).notices, [], "a production configuration as documented says nothing");
  // With the setting itself set too, no default is left in force: said, not refused.
  assert.equal(loadConfig({ ...production, AUTH_MAX_TOKEN_LIFETIME: "3600", AUTH_MAX_TOKEN_LIFETIME_SECONDS: "3600" }).notices, [
    "AUTH_MAX_TOKEN_LIFETIME_SECONDS is not a setting and is ignored: did you mean AUTH_MAX_TOKEN_LIFETIME?",
  ]);
  try {
    loadConfig({ ...production, AUTH_MAX_TOKEN_LIFETIME_SECONDS: "3600", AUTH_JWKS_MAX_AGE: "10" });
    assert.unreachable("a misnamed bound would leave the default in force");
  } catch (error) {
    assert.instance(error, ConfigError);
    assert.match(String(error), "AUTH_MAX_TOKEN_LIFETIME_SECONDS is not a setting: AUTH_MAX_TOKEN_LIFETIME is");
    assert.match(String(error), "AUTH_JWKS_MAX_AGE is not a setting: AUTH_JWKS_MAX_AGE_SECONDS is");
  }
  // A refused start says what a start would have warned of: the setting it asks for may be one set under a misspelt name.
  const misspelt = refusal({ ...production, AUTH_AUDIENCE: "", AUTH_AUDIENCES: "entity-versions" });
  assert.match(misspelt, "needs AUTH_ISSUER and AUTH_AUDIENCE", misspelt);
  assert.match(misspelt, "Also: AUTH_AUDIENCES is not a setting and is ignored: did you mean AUTH_AUDIENCE?", misspelt);
});

test("secrets a generator made pass the production check", () => {
  const base = {
    NODE_ENV: "production",
    DATABASE_URL: "mysql://u:p@db:3306/versions?ssl-mode=VERIFY_IDENTITY",
    AZURE_STORAGE_CONNECTION_STRING: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
  };
  const generators = [() => randomBytes(32).toString("base64"), () => randomBytes(32).toString("hex"), () => randomBytes(24).toString("base64url")];
  for (let i = 0; i < 50; i++) {
    for (const generate of generators) {
      // Two secrets, as production needs: the same one for both is refused.
      const [jwt, page] = [generate(), generate()];
      assert.is(loadConfig({ ...base, AUTH_JWT_SECRET: jwt, PAGE_TOKEN_SECRET: page }).production, true, `${jwt} ${page}`);
    }
  }
});

/** The message a refused configuration stops with. */
function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (error) {
    assert.instance(error, ConfigError);
    return (error as Error).message;
  }
  throw new Error(`${JSON.stringify(env)} was accepted`);
}

test("one start names every database and blob setting to fix, and nothing of a value it could not read", () => {
  const database = refusal({ ...productionEnv, DATABASE_POOL_MAX: "0", DATABASE_URL: "mysql://hC@db.internal/hC" });
  assert.match(database, /^3 settings need fixing:/, database);
  for (const part of ["DATABASE_POOL_MAX", "password in DATABASE_URL", "needs TLS to a MySQL on another host (db.internal)"]) assert.match(database, part);
  const azurite = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://azurite.internal:10000/devstoreaccount1";
  const blob = refusal({ ...productionEnv, AZURE_STORAGE_CONTAINER: "Versions", AZURE_STORAGE_CONNECTION_STRING: azurite });
  assert.match(blob, /^3 settings need fixing:/, blob);
  for (const part of ["AZURE_STORAGE_CONTAINER", "development key", "https blob endpoint"]) assert.match(blob, part);
  const embedded = refusal({ AZURE_STORAGE_CONTAINER: "Versions", AZURITE_PORT: "x" });
  for (const part of ["AZURE_STORAGE_CONTAINER", "AZURITE_PORT"]) assert.match(embedded, part);
  // Every problem of the query at once, then no more of it.
  const query = refusal({ ...productionEnv, DATABASE_URL: "mysql://u:p@db/versions?ssl=true&ssl-mode=ON" });
  for (const part of ['parameter "ssl"', 'ssl-mode "ON"']) assert.match(query, part);
  assert.not.match(query, "needs TLS", query);
  // A URL that could not be read is named alone: no password or TLS asked of it.
  for (const url of ["mysql//db/versions", "postgres://db/versions", "mysql://u:p#w@db:3306/x"]) {
    const unread = refusal({ ...productionEnv, DATABASE_POOL_MAX: "0", DATABASE_URL: url });
    assert.match(unread, /^2 settings need fixing:/, unread);
    assert.match(unread, "DATABASE_POOL_MAX");
    assert.not.match(unread, /password in DATABASE_URL|needs TLS/, unread);
  }
});

test("every nested part of a loaded configuration is frozen, the database's TLS too", () => {
  const frozen = (value: unknown, at: string): void => {
    if (typeof value !== "object" || value === null) return;
    assert.ok(Object.isFrozen(value), `${at} is not frozen`);
    for (const [key, inner] of Object.entries(value)) frozen(inner, `${at}.${key}`);
  };
  const config = loadConfig({ ...productionEnv, DATABASE_URL: `mysql://u:p@db:3306/versions?ssl-mode=VERIFY_CA&ssl-ca=${anyFile}` });
  assert.ok(config.database.kind === "mysql" && config.database.tls !== undefined);
  frozen(config, "config");
  frozen(loadDatabaseConfig(productionEnv), "database");
  frozen(loadConfig({}), "development");
});

test("AZURE_STORAGE_CONNECTION_STRING needs AccountName and AccountKey spelled exactly so, each with a value, as the Azure SDK reads them", () => {
  const good = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net";
  assert.is(loadConfig({ AZURE_STORAGE_CONNECTION_STRING: good }).blob.kind, "azure");
  assert.is(loadConfig({ AZURE_STORAGE_CONNECTION_STRING: ` ${good.replace(";AccountKey=", "; AccountKey=")} ` }).blob.kind, "azure");
  const wrong = [
    good.replace("AccountKey=", "accountkey="),
    good.replace("AccountName=", "ACCOUNTNAME="),
    good.replace("AccountKey=a2V5", "AccountKey= "),
    good.replace("AccountKey=a2V5", "AccountKey="),
    good.replace("AccountKey=", "AccountKey ="),
    `${good};accountkey=b3RoZXI=`,
  ];
  for (const connectionString of wrong) {
    const message = refusal({ AZURE_STORAGE_CONNECTION_STRING: connectionString });
    assert.match(message, "AZURE_STORAGE_CONNECTION_STRING must carry AccountName and AccountKey, spelled exactly so", connectionString);
  }
  assert.match(refusal({ AZURE_STORAGE_CONNECTION_STRING: good.replace("AccountKey=", "accountkey=") }), "AccountKey is missing");
  // The README's placeholder left in: the SDK would stop the start naming no variable.
  for (const key of ["…", "@@@@", "<key>"]) {
    assert.match(refusal({ AZURE_STORAGE_CONNECTION_STRING: good.replace("a2V5", key) }), "AZURE_STORAGE_CONNECTION_STRING's AccountKey is not a base64 key", key);
  }
});

test("PAGE_TOKEN_SECRET_PREVIOUS: read as a secret, held to PAGE_TOKEN_SECRET's rules", () => {
  const previous = "Qm9vdHN0cmFwUHJldmlvdXNTZWNyZXQxMjM0NTY3OA==";
  assert.is(loadConfig({ PAGE_TOKEN_SECRET_PREVIOUS: previous }).pageTokenSecretPrevious, previous);
  assert.is(loadConfig({}).pageTokenSecretPrevious, undefined);
  assert.match(refusal({ PAGE_TOKEN_SECRET_PREVIOUS: "short" }), "PAGE_TOKEN_SECRET_PREVIOUS must be at least 32 bytes");
  assert.match(refusal({ ...productionEnv, PAGE_TOKEN_SECRET_PREVIOUS: "a".repeat(40) }), "PAGE_TOKEN_SECRET_PREVIOUS");
  const jwt = "Zq3x9Lr7Tb2Wm5Kc8Hf1Jd4Gs6Pn0Vy+/AbCdEfGh=";
  assert.match(refusal({ ...productionEnv, AUTH_JWT_SECRET: jwt, AUTH_JWKS_URL: "", PAGE_TOKEN_SECRET_PREVIOUS: jwt }), "PAGE_TOKEN_SECRET_PREVIOUS other than AUTH_JWT_SECRET");
});

test("production names a DATABASE_URL's link problem in the same start as a parameter it refuses", () => {
  const both = refusal({ ...productionEnv, DATABASE_URL: "mysql://u:p@db.internal/versions?ssl-mode=REQUIRED&connectTimeout=5000" });
  assert.match(both, 'parameter "connectTimeout"');
  assert.match(both, "refuses DATABASE_URL's ssl-mode=REQUIRED");
  const none = refusal({ ...productionEnv, DATABASE_URL: "mysql://u:p@db.internal/versions?charset=utf8mb4" });
  assert.match(none, 'parameter "charset"');
  assert.match(none, "needs TLS to a MySQL on another host (db.internal)");
  const badMode = refusal({ ...productionEnv, DATABASE_URL: "mysql://u:p@db.internal/versions?ssl-mode=STRICT&charset=x" });
  assert.match(badMode, 'ssl-mode "STRICT" is not one of');
  assert.not.match(badMode, "needs TLS", "nothing asked of a mode that could not be read");
});

test("a connection string part with spaces after its \"=\" is refused: the SDK keeps them", () => {
  const good = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net";
  assert.match(refusal({ AZURE_STORAGE_CONNECTION_STRING: good.replace("AccountName=", "AccountName= ") }), "AccountName has spaces after");
  assert.match(refusal({ AZURE_STORAGE_CONNECTION_STRING: good.replace("EndpointSuffix=", "EndpointSuffix= ") }), "EndpointSuffix has spaces after");
  assert.is(loadConfig({ AZURE_STORAGE_CONNECTION_STRING: good.replaceAll(";", "; ") }).blob.kind, "azure", "spaces between parts are fine");
});

test("an AUTH_JWKS_URL holding a user name or password is refused without being quoted", () => {
  const message = refusal({ AUTH_JWKS_URL: "https://svc:hunter2@idp.example/keys" });
  assert.match(message, "AUTH_JWKS_URL holds a user name or password");
  assert.not.match(message, "hunter2");
  for (const env of [{ AUTH_JWKS_URL: "htps://user:hunter2@keys.example/jwks.json" }, { ...productionEnv, AUTH_JWKS_URL: "http://keys.example/jwks.json?api_key=hunter2" }]) {
    const refused = refusal(env);
    assert.match(refused, "AUTH_JWKS_URL");
    assert.not.match(refused, "hunter2", refused);
  }
});

test("short settings misspelt are said too (NODE_EVN, PROT, LOG_LEVL), and NODE_ENV misspelt as production is refused", () => {
  const notices = loadConfig({ NODE_EVN: "test", PROT: "9000", LOG_LEVL: "debug", DATA_DIRR: "/tmp/x", HSOT: "0.0.0.0", HOME: "/root", HOSTNAME: "pod-1", PWD: "/srv", TERM: "xterm", NODE_PATH: "/x", TMPDIR: "/tmp", LOGNAME: "root" }).notices;
  assert.equal([...notices].sort(), [
    "DATA_DIRR is not a setting and is ignored: did you mean DATA_DIR?",
    "HSOT is not a setting and is ignored: did you mean HOST?",
    "LOG_LEVL is not a setting and is ignored: did you mean LOG_LEVEL?",
    "NODE_EVN is not a setting and is ignored: did you mean NODE_ENV?",
    "PROT is not a setting and is ignored: did you mean PORT?",
  ]);
  assert.match(refusal({ NODE_EVN: "production" }), "NODE_EVN=production is not a setting: NODE_ENV is. Set NODE_ENV=production");
  assert.match(refusal({ NODE_EMV: " Production" }), "NODE_EMV=production is not a setting");
});

test("METRICS_PORT must differ from PORT (0, any free port, excepted)", () => {
  assert.match(refusal({ METRICS_PORT: "8080" }), "METRICS_PORT must differ from PORT (both 8080)");
  assert.match(refusal({ PORT: "9464", METRICS_PORT: " 9464" }), "METRICS_PORT must differ from PORT");
  assert.is(loadConfig({ PORT: "0", METRICS_PORT: "0" }).metricsPort, 0);
  assert.is(loadConfig({ METRICS_PORT: "9464" }).metricsPort, 9464);
});

test("production takes at most 7 days of AUTH_MAX_TOKEN_LIFETIME", () => {
  assert.match(refusal({ ...productionEnv, AUTH_MAX_TOKEN_LIFETIME: "31536000" }), "at most 604800 s of AUTH_MAX_TOKEN_LIFETIME");
  assert.match(refusal({ ...productionEnv, AUTH_MAX_TOKEN_LIFETIME: "604801" }), "AUTH_MAX_TOKEN_LIFETIME");
  assert.is(loadConfig({ ...productionEnv, AUTH_MAX_TOKEN_LIFETIME: "604800" }).auth.maxTokenLifetimeSeconds, 604800);
  assert.is(loadConfig({ AUTH_MAX_TOKEN_LIFETIME: "31536000" }).auth.maxTokenLifetimeSeconds, 31536000, "outside production the operator's business");
});

test("a whole number is decimal digits: no hex, binary, octal, exponent, sign or fraction", () => {
  for (const port of ["0xa0f0", "4.12e4", "0b1010", "0o17", "+8080", "-0", "8080.0", "1_000", "8 080", "Infinity"]) {
    assert.match(refusal({ PORT: port }), `PORT must be a whole number from 0 to 65535, got "${port}"`);
  }
  assert.is(loadConfig({ PORT: " 9000\n" }).port, 9000);
  assert.is(loadConfig({ PORT: "09000" }).port, 9000, "leading zeros are still decimal");
});

test("a setting set in other letter case is said like any near miss, and refused in production when the setting itself is not set", () => {
  assert.equal(loadConfig({ auth_max_token_lifetime: "600", Watch_Max_Per_Caler: "3" }).notices, [
    "auth_max_token_lifetime is not a setting and is ignored: did you mean AUTH_MAX_TOKEN_LIFETIME?",
    "Watch_Max_Per_Caler is not a setting and is ignored: did you mean WATCH_MAX_PER_CALLER?",
  ]);
  assert.match(refusal({ ...productionEnv, auth_max_token_lifetime: "600" }), "auth_max_token_lifetime is not a setting: AUTH_MAX_TOKEN_LIFETIME is (names are read with their letter case");
  assert.match(refusal({ ...productionEnv, auth_max_token_lifetime_seconds: "600" }), "auth_max_token_lifetime_seconds is not a setting: AUTH_MAX_TOKEN_LIFETIME is (in the unit");
  assert.equal(loadConfig({ ...productionEnv, AUTH_MAX_TOKEN_LIFETIME: "600", auth_max_token_lifetime: "600" }).notices, [
    "auth_max_token_lifetime is not a setting and is ignored: did you mean AUTH_MAX_TOKEN_LIFETIME?",
  ]);
});

test.run();

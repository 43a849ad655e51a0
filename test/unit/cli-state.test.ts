// The CLI's small pieces that decide behaviour without a service: where
// settings come from, the state file, default version strings, the exit
// code of a service error, and the local reading of a token.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { transferError } from "../../src/cli/blob-transfer.js";
import { CliError, ServiceError } from "../../src/cli/cli-error.js";
import { ExitCode, exitCodeForServiceError } from "../../src/cli/exit-codes.js";
import { requireToken, resolveSettings } from "../../src/cli/settings.js";
import { staleBaseError } from "../../src/cli/stale-base.js";
import { basesElsewhere, readBase, recordBase, stateFileName, stateLockName } from "../../src/cli/state-file.js";
import { summariseToken } from "../../src/cli/token-claims.js";
import { secondAfter, versionStringAt } from "../../src/cli/version-clock.js";
import { token } from "../support/tokens.js";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-state-"));

test("settings: flags, then the environment, then the development defaults", () => {
  const cwd = fs.mkdtempSync(path.join(scratch, "cwd-"));
  const env = { ENTITY_VERSIONS_URL: "http://env.test:9000/", ENTITY_VERSIONS_TOKEN: "env-token" };
  assert.equal(resolveSettings({ url: "http://flag.test", token: "flag-token" }, env, cwd), {
    url: "http://flag.test",
    urlSource: "--url",
    token: "flag-token",
    tokenSource: "--token",
  });
  const fromEnv = resolveSettings({}, env, cwd);
  assert.is(fromEnv.url, "http://env.test:9000");
  assert.is(fromEnv.token, "env-token");
  // A token pasted with its scheme, as an Authorization header carries it.
  assert.is(resolveSettings({ token: "Bearer eyJ.abc.def" }, env, cwd).token, "eyJ.abc.def");
  assert.is(resolveSettings({}, { ENTITY_VERSIONS_TOKEN: "bearer  eyJ.x.y" }, cwd).token, "eyJ.x.y");
  // Given but empty (a script's unset variable) is a usage error, not another identity or service.
  for (const flags of [{ token: "" }, { token: "Bearer " }, { url: " " }]) {
    assert.throws(() => resolveSettings(flags, env, cwd), (e: unknown) => e instanceof CliError && e.exitCode === ExitCode.usage && /is empty/.test(e.message), JSON.stringify(flags));
  }
  // So is an environment variable set to nothing, unless a flag overrides it.
  for (const empty of [{ ENTITY_VERSIONS_TOKEN: "" }, { ENTITY_VERSIONS_TOKEN: "Bearer " }, { ENTITY_VERSIONS_URL: " " }]) {
    assert.throws(
      () => resolveSettings({}, empty, cwd),
      (e: unknown) => e instanceof CliError && e.exitCode === ExitCode.usage && /is set but empty/.test(e.message) && e.message.startsWith(Object.keys(empty)[0]!),
      JSON.stringify(empty),
    );
  }
  assert.is(resolveSettings({ token: "flag-token" }, { ENTITY_VERSIONS_TOKEN: "" }, cwd).token, "flag-token");
  const bare = resolveSettings({}, {}, cwd);
  assert.is(bare.url, "http://localhost:8080");
  assert.is(bare.token, undefined);
  assert.throws(() => requireToken(bare), (e: unknown) => e instanceof CliError && e.code === "NO_TOKEN" && e.exitCode === ExitCode.noAccess);
  fs.mkdirSync(path.join(cwd, "data"));
  fs.writeFileSync(path.join(cwd, "data", "dev-token"), "dev-token-value\n");
  const dev = resolveSettings({}, {}, cwd);
  assert.is(dev.token, "dev-token-value");
  assert.is(dev.tokenSource, "./data/dev-token");
  // A service started with DATA_DIR writes its token there, signed with its own secret.
  const other = resolveSettings({}, { DATA_DIR: "./data-mysql" }, cwd);
  assert.is(other.token, undefined, "not ./data's token, which that service would refuse");
  assert.throws(() => requireToken(other), (e: unknown) => e instanceof CliError && e.message.includes("wrote ./data-mysql/dev-token"));
  fs.mkdirSync(path.join(cwd, "data-mysql"));
  fs.writeFileSync(path.join(cwd, "data-mysql", "dev-token"), "mysql-token-value\n");
  const mysql = resolveSettings({}, { DATA_DIR: "data-mysql" }, cwd);
  assert.equal([mysql.token, mysql.tokenSource], ["mysql-token-value", "./data-mysql/dev-token"]);
  const absolute = resolveSettings({}, { DATA_DIR: path.join(cwd, "data-mysql") }, cwd);
  assert.equal([absolute.token, absolute.tokenSource], ["mysql-token-value", path.join(cwd, "data-mysql", "dev-token")]);
  assert.throws(() => resolveSettings({ url: "ftp://x" }, {}, cwd), (e: unknown) => e instanceof CliError && e.exitCode === ExitCode.usage);
  assert.throws(
    () => resolveSettings({ url: "http://localhost:8080/api/" }, {}, cwd),
    (e: unknown) => e instanceof CliError && e.exitCode === ExitCode.usage && e.message.includes('without /api: "http://localhost:8080", not'),
  );
  assert.is(resolveSettings({ url: "https://gw.example/entity-versions/" }, {}, cwd).url, "https://gw.example/entity-versions", "a root behind a path prefix is fine");
});

test("state file: one base per service and entity, others kept, written whole", () => {
  const dir = fs.mkdtempSync(path.join(scratch, "state-"));
  const record = (id: string) => ({ version_id: id, version: "2026.01.01-000000", source_hash: "a".repeat(64), via: "push" as const, recorded_at: "2026-01-01T00:00:00.000Z" });
  assert.is(readBase(dir, "http://a", "app"), undefined);
  recordBase(dir, "http://a", "app", record("v1"));
  recordBase(dir, "http://a", "other", record("v2"));
  recordBase(dir, "http://b", "app", record("v3"));
  recordBase(dir, "http://a", "app", record("v4"));
  assert.is(readBase(dir, "http://a", "app")?.version_id, "v4");
  assert.is(readBase(dir, "http://a", "other")?.version_id, "v2");
  assert.is(readBase(dir, "http://b", "app")?.version_id, "v3");
  assert.equal(fs.readdirSync(dir), [stateFileName], "no temporary file left behind");
  // Not JSON, or JSON whose entries were edited into something no push can build on.
  for (const text of ["{not json", '{"format":1,"services":{"http://a":{"app":null}}}', '{"format":1,"services":{"http://a":{"app":{"version_id":42}}}}', '{"format":1,"services":{"http://a":[]}}']) {
    fs.writeFileSync(path.join(dir, stateFileName), text);
    assert.throws(() => readBase(dir, "http://a", "app"), (e: unknown) => e instanceof CliError && e.code === "STATE_FILE_INVALID", text);
  }
});

test("a push with no record under its URL, refused STALE_BASE, is told of the base recorded under another spelling of a URL", () => {
  const dir = fs.mkdtempSync(path.join(scratch, "state-"));
  const record = { version_id: "v-tip", version: "2026.01.01-000000", source_hash: "a".repeat(64), via: "push" as const, recorded_at: "2026-01-01T00:00:00.000Z" };
  recordBase(dir, "http://localhost:8080", "app", record);
  recordBase(dir, "http://localhost:8080", "other", { ...record, version_id: "v-other" });
  assert.is(readBase(dir, "http://127.0.0.1:8080", "app"), undefined, "a base is kept per URL, and never sent to another");
  const elsewhere = basesElsewhere(dir, "http://127.0.0.1:8080", "app");
  assert.equal(elsewhere.map((e) => [e.service, e.base.version_id]), [["http://localhost:8080", "v-tip"]]);
  const refused = new ServiceError(409, "STALE_BASE", "Base version \"\" is not the tip", { latest_version: { id: "v-tip", version: "2026.01.01-000000", published_by: "dev", created_at: "2026-01-01T00:00:00.000Z" } });
  const told = staleBaseError(refused, { entity: "app", target: ".", base: undefined, baseFrom: undefined, elsewhere }, { url: "http://127.0.0.1:8080", urlSource: "ENTITY_VERSIONS_URL", token: "t", tokenSource: "ENTITY_VERSIONS_TOKEN" });
  assert.ok(told.hints.some((h) => h.includes("records v-tip as the base for http://localhost:8080") && h.includes("pass --base v-tip")), told.hints.join("\n"));
  assert.ok(told.hints.some((h) => h === "  entity-versions push . --entity app --base v-tip"), "settings from the environment are not repeated");
});

test("STALE_BASE's commands reach the same service when pasted: its --url when a flag gave it, a note for the --token, the folder quoted", () => {
  const refused = new ServiceError(409, "STALE_BASE", "Base version \"v1\" is not the tip", { latest_version: { id: "v-tip", version: "2026.01.01-000000", published_by: "dev", created_at: "2026-01-01T00:00:00.000Z" } });
  const told = staleBaseError(refused, { entity: "app", target: "my app", base: "v1", baseFrom: "--base" }, { url: "http://10.0.0.5:9000", urlSource: "--url", token: "t", tokenSource: "--token" });
  const commands = told.hints.filter((h) => h.startsWith("  "));
  assert.is(commands.length, 3, told.hints.join("\n"));
  assert.match(commands[0]!, /^  entity-versions download app --version-id v-tip -o \S+ --url http:\/\/10\.0\.0\.5:9000$/);
  assert.is(commands[1], "  entity-versions push 'my app' --entity app --base v-tip --url http://10.0.0.5:9000");
  assert.is(commands[2], "  (with the same --token)");
});

test("state file: commands writing one folder at once (parallel file pushes from one CI directory) each keep their base; a lock left by a killed command is taken over", async () => {
  const dir = fs.mkdtempSync(path.join(scratch, "parallel-"));
  const module = new URL("../../src/cli/state-file.ts", import.meta.url).href;
  const writers = 6;
  const perWriter = 15;
  const code = `
    const { recordBase } = await import(${JSON.stringify(module)});
    const [dir, n, count] = process.argv.slice(-3);
    for (let i = 0; i < Number(count); i++) {
      recordBase(dir, "http://a", "e" + n + "-" + i, { version_id: "v" + i, version: "2026.01.01-000000", source_hash: "a".repeat(64), via: "push", recorded_at: "2026-01-01T00:00:00.000Z" });
    }`;
  const runs = Array.from({ length: writers }, (_, n) =>
    new Promise<number | null>((resolve, reject) => {
      const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code, dir, String(n), String(perWriter)], { stdio: ["ignore", "ignore", "inherit"] });
      child.on("error", reject);
      child.on("exit", resolve);
    }),
  );
  assert.equal(await Promise.all(runs), Array(writers).fill(0));
  const doc = JSON.parse(fs.readFileSync(path.join(dir, stateFileName), "utf8")) as { services: Record<string, Record<string, unknown>> };
  assert.is(Object.keys(doc.services["http://a"]!).length, writers * perWriter, "every command's bases were kept");
  assert.equal(fs.readdirSync(dir), [stateFileName], "no lock or temporary file left behind");
  // A lock a killed command left behind is taken over once stale, not waited on forever.
  const lock = path.join(dir, stateLockName);
  fs.writeFileSync(lock, "");
  const old = new Date(Date.now() - 60_000);
  fs.utimesSync(lock, old, old);
  recordBase(dir, "http://a", "after-kill", { version_id: "v", version: "2026.01.01-000000", source_hash: "a".repeat(64), via: "push", recorded_at: "2026-01-01T00:00:00.000Z" });
  assert.is(readBase(dir, "http://a", "after-kill")?.version_id, "v");
  assert.not.ok(fs.existsSync(lock));
});

test("a failed blob transfer names the URL without its signature, and says what to do", () => {
  const url = "http://127.0.0.1:1/acct/c/uploads/app/p?sv=2025&sig=SECRET";
  const failed = transferError("upload to", url, Object.assign(new Error(""), { statusCode: 500 }));
  assert.is(failed.code, "BLOB_TRANSFER_FAILED");
  assert.match(failed.message, /^upload to http:\/\/127\.0\.0\.1:1\/acct\/c\/uploads\/app\/p failed with HTTP 500 \(the blob store failed, after retries: run the command again later;/);
  assert.not.match(failed.message, "SECRET");
  assert.match(transferError("download of", url, Object.assign(new Error("AuthenticationFailed"), { statusCode: 403 })).message, "failed with HTTP 403: AuthenticationFailed (the signed URL was refused");
  // A package the store does not hold: what to do about the version.
  assert.match(transferError("download from", url, Object.assign(new Error("BlobNotFound"), { statusCode: 404 })).message, "failed with HTTP 404: BlobNotFound (the blob store does not hold this version's package");
  // No store to connect to (the embedded Azurite of a service on another machine): where it is, and the two ways out.
  const away = "http://127.0.0.1:10000/devstoreaccount1/c/uploads/app/p?sv=2025&sig=SECRET";
  const refused = transferError("upload to", away, Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:10000"), { code: "ECONNREFUSED" }));
  assert.is(
    refused.message,
    "upload to http://127.0.0.1:10000/devstoreaccount1/c/uploads/app/p failed: connect ECONNREFUSED 127.0.0.1:10000 (the blob store at 127.0.0.1:10000 named in the service's signed URL is not reachable from this machine; the embedded Azurite of `npm start` listens on 127.0.0.1 only: run the CLI on the service's machine, or give the service a store it can reach (AZURE_STORAGE_CONNECTION_STRING))",
  );
  assert.match(transferError("download from", "https://store.example/c/p?sig=SECRET", Object.assign(new Error("getaddrinfo ENOTFOUND store.example"), { code: "ENOTFOUND" })).message, "the blob store at store.example:443 named");
  // A connection cut once the store was reached is no sign that it cannot be reached.
  assert.not.match(transferError("upload to", away, Object.assign(new Error("socket hang up"), { code: "ECONNRESET" })).message, "not reachable");
});

test("default versions: UTC, and the next second across day and year boundaries", () => {
  assert.is(versionStringAt(new Date("2026-03-04T05:06:07.890Z")), "2026.03.04-050607");
  assert.is(secondAfter("2026.03.04-050607"), "2026.03.04-050608");
  assert.is(secondAfter("2026.12.31-235959"), "2027.01.01-000000");
  assert.is(secondAfter("2028.02.28-235959"), "2028.02.29-000000");
});

test("exit codes of service errors follow the documented table", () => {
  assert.is(exitCodeForServiceError("STALE_BASE", 409), 3);
  assert.is(exitCodeForServiceError("ACTIVE_VERSION_CHANGED", 409), 3);
  for (const code of ["ENTITY_NOT_FOUND", "VERSION_NOT_FOUND", "NO_ACTIVE_VERSION"]) assert.is(exitCodeForServiceError(code, 404), 4, code);
  assert.is(exitCodeForServiceError("PERMISSION_DENIED", 403), 4);
  assert.is(exitCodeForServiceError("TOKEN_EXPIRED", 401), 4);
  assert.is(exitCodeForServiceError("VERSION_ALREADY_EXISTS", 409), 1);
  assert.is(exitCodeForServiceError("DATABASE_UNAVAILABLE", 503), 1);
});

test("whoami's decoding: claims without the secret, expiry noticed", async () => {
  const live = summariseToken(await token({ sub: "alice", roles: ["publisher"], orgs: ["acme"], expiresIn: 600 }));
  assert.is(live.sub, "alice");
  assert.equal(live.roles, ["publisher"]);
  assert.equal(live.orgs, ["acme"]);
  assert.is(live.expired, false);
  assert.ok(live.expiresAt !== undefined && Date.parse(live.expiresAt) > Date.now());
  assert.is(summariseToken(await token({ expiresIn: -10 })).expired, true);
  assert.throws(() => summariseToken("not-a-jwt"), (e: unknown) => e instanceof CliError && e.code === "TOKEN_MALFORMED" && e.exitCode === 4);
  // An exp no date can hold is no expiry time, not a crash.
  const unsigned = (payload: object) => `${Buffer.from('{"alg":"none"}').toString("base64url")}.${Buffer.from(JSON.stringify(payload)).toString("base64url")}.`;
  for (const exp of [1e13, 1e300]) {
    const far = summariseToken(unsigned({ sub: "alice", exp }));
    assert.equal([far.expiresAt, far.expired], [undefined, false], String(exp));
  }
});

test.after(() => fs.rmSync(scratch, { recursive: true, force: true }));

test("a token pasted across lines, or with a stray character, is refused naming its source and the place, never itself (exit 4)", () => {
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ev-settings-"));
  for (const [flags, env, source] of [
    [{ token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZXYifQ\nSECRET-SIGNATURE" }, {}, "--token"],
    [{}, { ENTITY_VERSIONS_TOKEN: "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIi OiJkZXYifQ.SECRET-SIGNATURE" }, "ENTITY_VERSIONS_TOKEN"],
  ] as const) {
    const error = (() => {
      try {
        resolveSettings(flags, env, cwd);
        return undefined;
      } catch (e) {
        return e;
      }
    })();
    assert.instance(error, CliError);
    assert.equal([(error as CliError).code, (error as CliError).exitCode], ["TOKEN_MALFORMED", 4]);
    assert.ok((error as CliError).message.startsWith(`${source} is not a bearer token`), (error as CliError).message);
    assert.not.ok((error as CliError).message.includes("SECRET"), "the token is not printed");
  }
  assert.is(resolveSettings({ token: "Bearer a.b-c_d~e+f/g==" }, {}, cwd).token, "a.b-c_d~e+f/g==");
});

test("a URL with a user name or password is a usage error that prints neither", () => {
  const error = (() => {
    try {
      resolveSettings({ url: "http://admin:hunter2@localhost:18080", token: "t" }, {}, os.tmpdir());
      return undefined;
    } catch (e) {
      return e;
    }
  })();
  assert.instance(error, CliError);
  assert.is((error as CliError).exitCode, 2);
  assert.not.ok((error as CliError).message.includes("hunter2"));
  assert.match((error as CliError).message, '"http://localhost:18080"');
  // The root suggested for a URL ending in /api is the root, not the input again.
  assert.throws(() => resolveSettings({ url: "https://host.example/api?tenant=x", token: "t" }, {}, os.tmpdir()), (e: unknown) => e instanceof CliError && e.message.includes('without /api: "https://host.example"'));
  // Nor does any other refusal of such a URL (a CI log keeps what is printed).
  for (const url of ["http://ci:hunter2@example.com/api", "ftp://ci:hunter2@example.com", "http://ci:hunter2@example.com:99999", "http://ci:hunter2@exa mple.com", "https://ci:pa/hunter2@example.com", "https://ci:p#hunter2@example.com", "https://ci:p?hunter2@example.com:99999"]) {
    for (const settings of [[{ url, token: "t" }, {}], [{ token: "t" }, { ENTITY_VERSIONS_URL: url }]] as const) {
      try {
        resolveSettings(settings[0], settings[1], os.tmpdir());
        assert.unreachable(url);
      } catch (e) {
        assert.instance(e, CliError);
        assert.is((e as CliError).exitCode, 2, url);
        assert.not.ok((e as CliError).message.includes("hunter2"), (e as CliError).message);
      }
    }
  }
});

test.run();

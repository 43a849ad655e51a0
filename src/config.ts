import fs from "node:fs";
import path from "node:path";
import { connectionStringParts } from "./blob/connection-string.js";
import { azuriteKey } from "./blob/embedded-azurite.js";
import { misnamedSettings } from "./misnamed-settings.js";
import { isLoopbackHost } from "./net/loopback.js";

/** Where the versions are recorded. */
export type DatabaseConfig =
  | {
      readonly kind: "mysql";
      readonly url: string;
      readonly poolMax: number;
      readonly lockWaitTimeoutSeconds: number;
      readonly statementTimeoutMs: number;
      readonly acquireTimeoutMs: number;
      /** Most concurrent single-entity reads sent as one statement; 1 sends each alone. */
      readonly readBatchMax: number;
      /** Most concurrent confirms on different entities recorded in one transaction; 1 records each alone. */
      readonly confirmGroupMax: number;
      /** The hot reads as server-side prepared statements (mysql2 execute); off: plain queries. */
      readonly preparedStatements: boolean;
      /** TLS to the server (DATABASE_URL's `ssl-mode`, `ssl-ca`); undefined: none. */
      readonly tls?: DatabaseTls;
    }
  | {
      readonly kind: "sqlite";
      readonly file: string;
      /** The setting that named the file, for the start-up hints to name: DATA_DIR's default, or DATABASE_URL's sqlite: path. */
      readonly setting?: "DATA_DIR" | "DATABASE_URL";
    };

/** Where packages are stored. */
export type BlobConfig = (
  | { readonly kind: "azure"; readonly connectionString: string; readonly container: string }
  | { readonly kind: "embedded-azurite"; readonly location: string; readonly port: number; readonly container: string }
) & {
  /**
   * CLAIM_EMPTY_CONTAINER named the container: a database with versions may
   * claim it though it holds none of their packages (they are lost).
   */
  readonly claimEmpty: boolean;
};

/**
 * How callers authenticate. "dev" (no auth configured, not production): a
 * signing secret kept under dataDir and a printed token for user `dev`.
 */
export interface AuthConfig {
  readonly mode: "jwt" | "dev";
  /** Longest a token may live from iat (or from now, without iat) to exp; undefined: no bound. */
  readonly maxTokenLifetimeSeconds: number | undefined;
  readonly secret: string | undefined;
  readonly jwksUrl: string | undefined;
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
  readonly clockSkewSeconds: number;
  readonly jwksCooldownSeconds: number;
  /** Longest the JWKS is used without being fetched again: a key withdrawn from it stops verifying within this (plus tokenCacheSeconds). */
  readonly jwksMaxAgeSeconds: number;
  readonly tokenCacheSeconds: number;
}

/**
 * Bounds on what one client can make the server hold: HTTP/2 streams and
 * idle sessions, request bodies in flight and how long they may take, and
 * how long a call may run.
 */
export interface HttpLimits {
  /** Streams one HTTP/2 connection may have open at once (the SETTINGS the server advertises). */
  readonly maxConcurrentStreams: number;
  /** An HTTP/2 session or HTTP/1.1 keep-alive connection with no traffic for this long is closed. */
  readonly idleTimeoutMs: number;
  /** A request body must arrive whole within this long of its first byte being awaited. */
  readonly bodyTimeoutMs: number;
  /** A unary call's answer not taken by its client this long after it was ready is dropped (its stream reset). */
  readonly responseTimeoutMs: number;
  /** Request body bytes one connection may have in flight (read and not yet answered). */
  readonly maxConnectionBufferedBytes: number;
  /** Request body bytes the whole process may have in flight. */
  readonly maxBufferedBytes: number;
  /** The deadline of a call whose client set none (every REST call, gRPC and Connect calls without one). */
  readonly defaultDeadlineMs: number;
  /** Unary calls one connection may have running, counted until their work ends (a reset stream's too). */
  readonly maxCallsPerConnection: number;
  /** Unary calls the whole process may have running. */
  readonly maxCallsInFlight: number;
  /** Unary calls one caller (token sub) may have running in the process, over all its connections. */
  readonly maxCallsPerCaller: number;
  /** Unary calls that may wait for one of the process's places, in turn, when all are taken. */
  readonly maxCallsQueued: number;
  /** Connections the process accepts at once; more are closed as they arrive. */
  readonly maxConnections: number;
  /** Streams of the services that need no token (health Watch, reflection) the process holds open at once. */
  readonly maxOpenStreams: number;
}

/** Which RPC calls run in the scope that charges inflated messages (RPC_INFLATION_SCOPE). */
export type RpcInflationScope = "compressed" | "all";

/** How event watches are fed, kept alive and bounded. */
export interface WatchConfig {
  /** How often the database is read for new events while anything is watched (replicas see each other's changes within about this). */
  readonly pollIntervalMs: number;
  /** A watch quiet for this long is sent a bookmark, so that proxies and idle timeouts do not cut it. */
  readonly keepaliveMs: number;
  /** Watches one process serves at once. */
  readonly maxPerProcess: number;
  /** Watches one caller (token sub) may have open on one process at once. */
  readonly maxPerCaller: number;
}

/** The environments NODE_ENV may name; compared exactly. */
export const environments = ["production", "development", "test"] as const;

/** The service's whole configuration, read once at start-up and frozen. */
export interface Config {
  /** NODE_ENV=production: no embedded defaults, no development auth, strict auth settings. */
  readonly production: boolean;
  /** What the start says as warnings: variables set under names close to a setting's (misnamedSettings), which are ignored. */
  readonly notices: readonly string[];
  readonly http: HttpLimits;
  readonly auth: AuthConfig;
  readonly host: string;
  readonly port: number;
  /** A port of its own for `GET /metrics` (not served on `port` then); undefined: on `port`. */
  readonly metricsPort: number | undefined;
  readonly logLevel: string;
  readonly dataDir: string;
  readonly database: DatabaseConfig;
  readonly blob: BlobConfig;
  readonly uploadUrlTtlSeconds: number;
  readonly downloadUrlTtlSeconds: number;
  /** Confirms of one entity in this process copy their packages in turn (off: all at once). */
  readonly confirmCopiesInTurn: boolean;
  /**
   * Which RPC calls run in the scope that charges what their messages
   * inflate to: "compressed", those whose request names a content coding
   * (and every Connect GET naming one); "all", every call.
   */
  readonly rpcInflationScope: RpcInflationScope;
  readonly shutdownTimeoutMs: number;
  /**
   * How long a stopping service reports not ready while it goes on
   * serving, before it stops accepting: the time a load balancer takes to
   * see it and send no more.
   */
  readonly shutdownDrainMs: number;
  /** Bound on each blob store call, retries included. */
  readonly blobTimeoutMs: number;
  /** How often queued blob deletions are retried. */
  readonly blobDeletionIntervalMs: number;
  /** How long an issued upload may wait for its confirm before the sweeper removes it. */
  readonly orphanGraceSeconds: number;
  /** How often the orphan sweeper runs. */
  readonly sweepIntervalSeconds: number;
  /** Whether the sweeper deletes packages no version records (off: kept and logged, for a restore). */
  readonly sweepUnrecordedPackages: boolean;
  /** Events older than this many days are deleted by the sweeper; 0: kept for as long as their entity (the default). */
  readonly eventRetentionDays: number;
  /** Signs page tokens; replicas must share it. Undefined: a secret kept under dataDir. */
  readonly pageTokenSecret: string | undefined;
  /** The secret PAGE_TOKEN_SECRET replaced: its tokens are still accepted, none is sealed with it. */
  readonly pageTokenSecretPrevious: string | undefined;
  readonly limits: Limits;
  readonly watch: WatchConfig;
}

/** Bounds on what a request may carry. */
export interface Limits {
  readonly maxRequestBytes: number;
  readonly maxPackageBytes: number;
  readonly maxPackageJsonBytes: number;
  /** Most JSON values (objects, arrays and scalars, counted through) package_json may hold. */
  readonly maxPackageJsonValues: number;
  readonly maxServiceDependencies: number;
  /** Most publishers, shares and org stores each entity may list (each list on its own). */
  readonly maxAccessEntries: number;
  /** Most uploads one caller may have issued on an entity and not yet confirmed (nor swept): upload-url refuses that caller more. */
  readonly maxOpenUploadsPerEntity: number;
  /** What a page of ListVersions' package_json and service_dependencies may cost to serve, in bytes (versionDataCost; one version at least). */
  readonly maxPageBytes: number;
}

/** PAGE_MAX_BYTES's default. */
export const defaultPageMaxBytes = 1024 * 1024;

/** A configuration value is wrong; the message names the variable and what it accepts. */
export class ConfigError extends Error {
  override name = "ConfigError";
  /** Every problem found, when one part of the configuration has several. */
  readonly problems: readonly string[];

  /**
   * What a start would have warned of (a variable that is no setting, and
   * the one it may have meant): said with the refusal too, as the setting
   * a refusal names may be one that was set under a misspelt name.
   */
  readonly notices: readonly string[];

  constructor(message: string | readonly string[], notices: readonly string[] = []) {
    const problems = typeof message === "string" ? [message] : message;
    const said = problems.length === 1 ? problems[0]! : `${problems.length} settings need fixing:\n  - ${problems.join("\n  - ")}`;
    super(notices.length === 0 ? said : `${said}\nAlso: ${notices.join("\nAlso: ")}`);
    this.problems = problems;
    this.notices = notices;
  }
}

/**
 * Collects a part's problems rather than stopping at its first: `check`
 * runs a read that may throw ConfigError and keeps its message, `problem`
 * notes one, and `done` throws them all at once, so one start names every
 * setting to fix.
 */
function problemsOf() {
  const found: string[] = [];
  return {
    check<T>(read: () => T): T | undefined {
      try {
        return read();
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        found.push(...error.problems);
        return undefined;
      }
    },
    problem(message: string): void {
      found.push(message);
    },
    done(notices: readonly string[] = []): void {
      if (found.length > 0) throw new ConfigError(found, notices);
    },
  };
}

type Env = Readonly<Record<string, string | undefined>>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  // Decimal digits only: Number() would also take 0x1f90, 8.08e3, 0b1 or
  // +8080, which no README example writes and few would read as meant. No
  // setting takes a negative number, so a "-" is refused too.
  const digits = /^\s*\d+\s*$/.test(raw);
  const value = Number(raw);
  if (!digits || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}".`);
  }
  return value;
}

/**
 * Reads whole numbers into a problem list, so that a group of settings
 * names every bad value in it, not only its first: a bad one is noted and
 * read as undefined, and a check across settings skips what it cannot
 * read rather than name a value nobody set.
 */
function wholeNumbers(env: Env, p: ReturnType<typeof problemsOf>): (name: string, fallback: number, min: number, max: number) => number | undefined {
  return (name, fallback, min, max) => p.check(() => integer(env, name, fallback, min, max));
}

/** A group's settings once its problem list is empty: every one read. */
type AllRead<T> = { readonly [K in keyof T]: Exclude<T[K], undefined> };

function text(env: Env, name: string, fallback: string): string {
  const raw = env[name];
  return raw === undefined || raw.trim() === "" ? fallback : raw.trim();
}

/**
 * A secret key, trimmed (a value read from a file ends with a newline):
 * at least 32 bytes, since a key's strength is its length in bytes.
 */
function secret(env: Env, name: string): string | undefined {
  const value = optional(env, name);
  if (value !== undefined && Buffer.byteLength(value) < 32) {
    throw new ConfigError(`${name} must be at least 32 bytes (random; e.g. \`openssl rand -base64 32\`).`);
  }
  return value;
}

/**
 * Whether some run of 8 characters comes back later in the secret
 * ("password…password"): typed words do, generated secrets all but never
 * (64 random hex digits, the likeliest, fewer than once in a million).
 */
function repeatsARun(value: string): boolean {
  for (let i = 0; i + 16 <= value.length; i++) if (value.indexOf(value.slice(i, i + 8), i + 8) !== -1) return true;
  return false;
}

/**
 * Refuses, in production, a secret someone typed ("aaaa…", "secretsecret…",
 * "passwordpassword1234…"): it is guessed long before it is brute-forced,
 * whatever its length. A heuristic: it stops the obvious, not every weak key.
 */
function refuseTyped(name: string, value: string | undefined): void {
  if (value !== undefined && (new Set(value).size < 8 || repeatsARun(value))) {
    throw new ConfigError(
      `NODE_ENV=production needs a random ${name}: this one has fewer than 8 different characters, or repeats a run of 8 (make one with \`openssl rand -base64 32\`).`,
    );
  }
}

function onOff(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === "") return fallback;
  if (raw === "on") return true;
  if (raw === "off") return false;
  throw new ConfigError(`${name} must be on or off, got "${env[name]}".`);
}

function optional(env: Env, name: string): string | undefined {
  const raw = env[name]?.trim();
  return raw === undefined || raw === "" ? undefined : raw;
}

/** The longest download URL production signs: one a client fetches at once, with room for a slow link's retries. */
const productionDownloadUrlTtlMaxSeconds = 3600;

/** Production's bounds on how long a token or a withdrawn key keeps working, and how often anyone may make the service fetch the JWKS. */
const productionAuthCeilings = { maxTokenLifetimeSeconds: 7 * 24 * 3600, jwksMaxAgeSeconds: 600, tokenCacheSeconds: 300, jwksCooldownSecondsMin: 5 } as const;

function auth(env: Env, production: boolean): AuthConfig {
  const p = problemsOf();
  const jwtSecret = p.check(() => secret(env, "AUTH_JWT_SECRET"));
  const jwksUrl = optional(env, "AUTH_JWKS_URL");
  if (jwksUrl !== undefined) {
    let url: URL | undefined;
    try {
      url = new URL(jwksUrl);
    } catch {
      url = undefined;
    }
    // Quoted without a user name, password or query (which may hold a key).
    const shownJwks = url === undefined ? jwksUrl.replace(/\/\/.*@/, "//…@").replace(/\?.*/, "?…") : `${url.protocol}//${url.host}${url.pathname}${url.search === "" ? "" : "?…"}`;
    if (url === undefined || (url.protocol !== "https:" && url.protocol !== "http:")) {
      p.problem(`AUTH_JWKS_URL must be an http(s) URL, got "${shownJwks}".`);
    } else if (url.username !== "" || url.password !== "") {
      // fetch refuses such a URL: every fetch would fail. Not quoted (a password).
      p.problem("AUTH_JWKS_URL holds a user name or password, which fetch never sends: give the key set's URL without them (key sets are public).");
    } else if (production && url.protocol !== "https:") {
      // Keys fetched over plain HTTP can be swapped on the way: anyone on the
      // path could then sign tokens this service accepts.
      p.problem(`NODE_ENV=production needs an https:// AUTH_JWKS_URL (keys fetched over http can be swapped), got "${shownJwks}".`);
    }
  }
  if (production && optional(env, "AUTH_JWT_SECRET") === undefined && jwksUrl === undefined) {
    p.problem("NODE_ENV=production needs AUTH_JWT_SECRET or AUTH_JWKS_URL: the development token is never used in production.");
  }
  const issuer = optional(env, "AUTH_ISSUER");
  const audience = optional(env, "AUTH_AUDIENCE");
  // A JWKS is usually an identity provider's, shared by many applications:
  // without iss and aud checks, a token it issued for any of them would do.
  if (production && jwksUrl !== undefined && (issuer === undefined || audience === undefined)) {
    p.problem("NODE_ENV=production with AUTH_JWKS_URL needs AUTH_ISSUER and AUTH_AUDIENCE: otherwise a token the provider issued for another application is accepted.");
  }
  const lifetime = p.check(() => integer(env, "AUTH_MAX_TOKEN_LIFETIME", production ? 24 * 3600 : 0, 0, 365 * 24 * 3600));
  const clockSkewSeconds = p.check(() => integer(env, "AUTH_CLOCK_SKEW_SECONDS", 30, 0, 600));
  if (production) {
    p.check(() => refuseTyped("AUTH_JWT_SECRET", jwtSecret));
    if (lifetime === 0) {
      p.problem("NODE_ENV=production needs a bound on token lifetimes: set AUTH_MAX_TOKEN_LIFETIME to the most seconds a token may live (86400 by default), not 0.");
    }
    // A leaked token works until it expires: a bound of a year bounds nothing.
    if (lifetime !== undefined && lifetime > productionAuthCeilings.maxTokenLifetimeSeconds) {
      p.problem(`NODE_ENV=production takes at most ${productionAuthCeilings.maxTokenLifetimeSeconds} s of AUTH_MAX_TOKEN_LIFETIME (a leaked token works that long), got ${lifetime}: lower it (86400 by default).`);
    }
    if (clockSkewSeconds !== undefined && clockSkewSeconds > 300) {
      p.problem(`NODE_ENV=production takes at most 300 s of AUTH_CLOCK_SKEW_SECONDS (an expired token stays good that long), got ${clockSkewSeconds}: synchronise the clocks instead.`);
    }
  }
  const jwksCooldownSeconds = p.check(() => integer(env, "AUTH_JWKS_COOLDOWN_SECONDS", 30, 0, 3600));
  const jwksMaxAgeSeconds = p.check(() => integer(env, "AUTH_JWKS_MAX_AGE_SECONDS", 60, 1, 24 * 3600));
  const tokenCacheSeconds = p.check(() => integer(env, "AUTH_TOKEN_CACHE_SECONDS", 30, 0, 3600));
  if (production) {
    // A key withdrawn from the JWKS (a leaked one) keeps verifying for the
    // set's age plus a token's time in the cache.
    if (jwksMaxAgeSeconds !== undefined && jwksMaxAgeSeconds > productionAuthCeilings.jwksMaxAgeSeconds) {
      p.problem(`NODE_ENV=production takes at most ${productionAuthCeilings.jwksMaxAgeSeconds} s of AUTH_JWKS_MAX_AGE_SECONDS (a key withdrawn from the JWKS verifies tokens that long), got ${jwksMaxAgeSeconds}: lower it (60 by default).`);
    }
    if (tokenCacheSeconds !== undefined && tokenCacheSeconds > productionAuthCeilings.tokenCacheSeconds) {
      p.problem(`NODE_ENV=production takes at most ${productionAuthCeilings.tokenCacheSeconds} s of AUTH_TOKEN_CACHE_SECONDS (a token whose key was withdrawn is trusted that long), got ${tokenCacheSeconds}: lower it (30 by default).`);
    }
    // Any token naming an unknown kid, which takes no credential to make, fetches the JWKS.
    if (jwksCooldownSeconds !== undefined && jwksCooldownSeconds < productionAuthCeilings.jwksCooldownSecondsMin) {
      p.problem(`NODE_ENV=production needs AUTH_JWKS_COOLDOWN_SECONDS of at least ${productionAuthCeilings.jwksCooldownSecondsMin} (a token with an unknown kid, which anyone can make, fetches the JWKS again), got ${jwksCooldownSeconds}: raise it (30 by default).`);
    }
  }
  p.done();
  // Every read above succeeded (done() threw otherwise).
  return Object.freeze({
    mode: jwtSecret === undefined && jwksUrl === undefined ? "dev" : "jwt",
    secret: jwtSecret,
    jwksUrl,
    issuer,
    audience,
    maxTokenLifetimeSeconds: lifetime === 0 ? undefined : lifetime,
    clockSkewSeconds: clockSkewSeconds!,
    jwksCooldownSeconds: jwksCooldownSeconds!,
    jwksMaxAgeSeconds: jwksMaxAgeSeconds!,
    tokenCacheSeconds: tokenCacheSeconds!,
  });
}

function httpLimits(env: Env, maxRequestBytes: number | undefined, production: boolean, defaultDeadlineMs: number | undefined): HttpLimits {
  const p = problemsOf();
  const int = wholeNumbers(env, p);
  const maxConnectionBufferedBytes = int("MAX_CONNECTION_BUFFERED_BYTES", Math.max(4 * 1024 * 1024, maxRequestBytes ?? 0), 1024, 1024 * 1024 * 1024);
  const maxBufferedBytes = int("MAX_BUFFERED_BYTES", Math.max(64 * 1024 * 1024, maxConnectionBufferedBytes ?? 0), 1024, 16 * 1024 * 1024 * 1024);
  if (
    maxRequestBytes !== undefined &&
    maxConnectionBufferedBytes !== undefined &&
    maxBufferedBytes !== undefined &&
    (maxConnectionBufferedBytes < maxRequestBytes || maxBufferedBytes < maxConnectionBufferedBytes)
  ) {
    p.problem(
      `MAX_REQUEST_BYTES (${maxRequestBytes}) ≤ MAX_CONNECTION_BUFFERED_BYTES (${maxConnectionBufferedBytes}) ≤ MAX_BUFFERED_BYTES (${maxBufferedBytes}) must hold, or a largest request could never be read.`,
    );
  }
  const maxConcurrentStreams = int("HTTP2_MAX_CONCURRENT_STREAMS", 100, 1, 10_000);
  const maxCallsInFlight = int("HTTP_MAX_CALLS_IN_FLIGHT", 1000, 1, 1_000_000);
  // A quarter: one caller, however many connections it opens, leaves most places to the others.
  const maxCallsPerCaller = int("HTTP_MAX_CALLS_PER_CALLER", Math.max(1, Math.floor((maxCallsInFlight ?? 1000) / 4)), 1, 1_000_000);
  if (production && maxCallsInFlight !== undefined && maxCallsPerCaller !== undefined && maxCallsInFlight > 1 && maxCallsPerCaller >= maxCallsInFlight) {
    p.problem(
      `NODE_ENV=production needs HTTP_MAX_CALLS_PER_CALLER (${maxCallsPerCaller}) below HTTP_MAX_CALLS_IN_FLIGHT (${maxCallsInFlight}): one caller could take every place; leave it unset for a quarter.`,
    );
  }
  const limits = {
    maxConcurrentStreams,
    idleTimeoutMs: int("HTTP_IDLE_TIMEOUT_MS", 65_000, 1_000, 3_600_000),
    bodyTimeoutMs: int("REQUEST_BODY_TIMEOUT_MS", 10_000, 100, 600_000),
    responseTimeoutMs: int("RESPONSE_BODY_TIMEOUT_MS", 10_000, 100, 600_000),
    maxConnectionBufferedBytes,
    maxBufferedBytes,
    defaultDeadlineMs,
    // Twice the streams: a client's reset streams may still be finishing their work.
    maxCallsPerConnection: int("HTTP_MAX_CALLS_PER_CONNECTION", 2 * (maxConcurrentStreams ?? 100), 1, 100_000),
    maxCallsInFlight,
    maxCallsPerCaller,
    maxCallsQueued: int("HTTP_MAX_CALLS_QUEUED", 5000, 0, 1_000_000),
    maxConnections: int("HTTP_MAX_CONNECTIONS", 10_000, 1, 1_000_000),
    maxOpenStreams: int("HTTP_MAX_OPEN_STREAMS", 100, 1, 100_000),
  };
  p.done();
  return Object.freeze(limits as AllRead<typeof limits>);
}

/** The watch settings; `http` undefined when the HTTP settings could not be read (their own problems are named). */
function watch(env: Env, http: HttpLimits | undefined, production: boolean): WatchConfig {
  const p = problemsOf();
  const int = wholeNumbers(env, p);
  const keepaliveMs = int("WATCH_KEEPALIVE_MS", Math.min(15_000, Math.floor((http?.idleTimeoutMs ?? 65_000) / 2)), 100, 600_000);
  // A quiet stream must send something before the idle timeout closes its connection.
  if (http !== undefined && keepaliveMs !== undefined && keepaliveMs >= http.idleTimeoutMs) {
    p.problem(`WATCH_KEEPALIVE_MS (${keepaliveMs}) must be less than HTTP_IDLE_TIMEOUT_MS (${http.idleTimeoutMs}), or idle watches are cut.`);
  }
  const maxPerProcess = int("WATCH_MAX_PER_PROCESS", 1000, 1, 100_000);
  const maxPerCaller = int("WATCH_MAX_PER_CALLER", 20, 1, 100_000);
  if (production && maxPerProcess !== undefined && maxPerCaller !== undefined && maxPerProcess > 1 && maxPerCaller >= maxPerProcess) {
    p.problem(
      `NODE_ENV=production needs WATCH_MAX_PER_CALLER (${maxPerCaller}) below WATCH_MAX_PER_PROCESS (${maxPerProcess}): one caller could take every watch.`,
    );
  }
  const config = {
    pollIntervalMs: int("WATCH_POLL_INTERVAL_MS", 500, 10, 60_000),
    keepaliveMs,
    maxPerProcess,
    maxPerCaller,
  };
  p.done();
  return Object.freeze(config as AllRead<typeof config>);
}

/**
 * TLS to MySQL, as MySQL's own clients name it (`--ssl-mode`): REQUIRED
 * encrypts without checking the certificate, VERIFY_CA checks it against
 * the CAs, VERIFY_IDENTITY also checks it names the host.
 */
export interface DatabaseTls {
  readonly mode: "REQUIRED" | "VERIFY_CA" | "VERIFY_IDENTITY";
  /** A PEM file of the CAs to trust instead of Node's own (`ssl-ca`). */
  readonly caFile?: string;
}

const sslModes = ["DISABLED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"] as const;

/**
 * DATABASE_URL's query: TLS settings only; anything else would be dropped
 * unseen, so it is refused. Every problem in it is named at once.
 */
function databaseTls(url: URL): DatabaseTls | undefined {
  const p = problemsOf();
  let mode: (typeof sslModes)[number] | undefined = "DISABLED";
  let caFile: string | undefined;
  let caRead = true;
  for (const [key, value] of url.searchParams) {
    if (key === "ssl-mode") {
      mode = sslModes.find((m) => m === value.toUpperCase());
      if (mode === undefined) p.problem(`DATABASE_URL's ssl-mode "${value}" is not one of ${sslModes.join(", ")}.`);
    } else if (key === "ssl-ca") {
      caRead = fs.statSync(value, { throwIfNoEntry: false })?.isFile() === true;
      if (caRead) caFile = value;
      else p.problem(`DATABASE_URL's ssl-ca "${value}" is not a file here: name a PEM file of the CA certificates to trust.`);
    } else {
      p.problem(`DATABASE_URL's parameter "${key}" is not one this service reads: it takes ssl-mode (${sslModes.join(", ")}) and ssl-ca (a PEM file), e.g. mysql://user:password@host/db?ssl-mode=VERIFY_IDENTITY.`);
    }
  }
  // The checks across the two need both read: a mode misspelt or a CA not
  // found is named above, not again as a mismatch.
  if (mode !== undefined && caRead) {
    // REQUIRED and DISABLED check no certificate: a CA given there would be read by nobody.
    if (caFile !== undefined && mode !== "VERIFY_CA" && mode !== "VERIFY_IDENTITY") {
      p.problem(`DATABASE_URL gives ssl-ca with ssl-mode ${mode}, which checks no certificate: use ssl-mode=VERIFY_CA or VERIFY_IDENTITY to have it used.`);
    }
    // As MySQL's own client: checked against the public CAs and not against
    // the host name, any server with any public certificate would pass.
    if (mode === "VERIFY_CA" && caFile === undefined) {
      p.problem(`DATABASE_URL's ssl-mode=VERIFY_CA needs ssl-ca=<PEM file>, the private CA to trust: against the public CAs, without a check of the host name, any publicly certified server would pass. For a server with a public certificate use ssl-mode=VERIFY_IDENTITY.`);
    }
  }
  p.done();
  if (mode === "DISABLED" || mode === undefined) return undefined;
  // Frozen like every other part of the configuration: it is shared by every connection made.
  return Object.freeze(caFile === undefined ? { mode } : { mode, caFile });
}

/**
 * The problem, if any, with a production link to a MySQL on another host
 * that does not check whose certificate it gets: the database says which
 * blob each version downloads and who may publish, so whoever can stand in
 * the path could change a published version, as over an http blob endpoint
 * or JWKS. A link protected another way (a service mesh's mTLS) is said so
 * with an explicit ssl-mode=DISABLED.
 */
function productionDatabaseLink(url: URL, tls: DatabaseTls | undefined): string | undefined {
  // A link that never leaves the machine (a local proxy or sidecar doing the TLS).
  if (isLoopbackHost(url.hostname)) return undefined;
  const verify = "add ?ssl-mode=VERIFY_IDENTITY to DATABASE_URL (or VERIFY_CA, with &ssl-ca=<PEM file> for a private CA)";
  if (tls?.mode === "REQUIRED") {
    return `NODE_ENV=production refuses DATABASE_URL's ssl-mode=REQUIRED: it encrypts but checks no certificate, so anyone in the path can pose as the database; use ssl-mode=VERIFY_IDENTITY (or VERIFY_CA, with &ssl-ca=<PEM file> for a private CA).`;
  }
  if (tls === undefined && url.searchParams.get("ssl-mode")?.toUpperCase() !== "DISABLED") {
    return `NODE_ENV=production needs TLS to a MySQL on another host (${url.hostname}): ${verify}. Where the link is protected another way (a service mesh's mTLS), say so with ssl-mode=DISABLED.`;
  }
  return undefined;
}

/** DATABASE_URL read as a MySQL URL; undefined, with its problem noted, when it cannot be, so that nothing is checked of a URL misread. */
function mysqlUrl(raw: string, p: ReturnType<typeof problemsOf>): URL | undefined {
  const encodeHint = "write the user name and password percent-encoded, as encodeURIComponent does (a / ? # or % in them breaks the URL otherwise)";
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    p.problem(`DATABASE_URL must be mysql://user:password@host:port/database or sqlite:<file>; ${encodeHint}.`);
    return undefined;
  }
  if (url.protocol !== "mysql:") {
    p.problem(`DATABASE_URL scheme "${url.protocol}" is not supported: use mysql://user:password@host:port/database or sqlite:<file>.`);
    return undefined;
  }
  // A "#" or "?" in the password ends the URL's authority there: the rest
  // is read as a fragment or a query, and the host and database go missing.
  const at = raw.lastIndexOf("@");
  if ((url.hash !== "" || url.pathname.length <= 1) && at > 0 && /[#?]/.test(raw.slice(0, at))) {
    p.problem(`DATABASE_URL has a "#" or "?" before its host: ${encodeHint} ("#" is "%23", "?" is "%3F").`);
    return undefined;
  }
  // The host, password and query were read as written: what else is wrong with them is named too.
  if (url.pathname.length <= 1) p.problem("DATABASE_URL must name the database: mysql://user:password@host:port/database.");
  try {
    for (const part of [url.username, url.password, url.pathname]) decodeURIComponent(part);
  } catch {
    p.problem(`DATABASE_URL has a "%" that starts no escape: ${encodeHint} ("%" is "%25").`);
  }
  return url;
}

function database(env: Env, dataDir: string, production: boolean): DatabaseConfig {
  // Read whatever the database: a typo in a MySQL setting is refused on
  // SQLite too, not found out on the day the service moves to MySQL.
  const p = problemsOf();
  const int = wholeNumbers(env, p);
  const read = {
    poolMax: int("DATABASE_POOL_MAX", 10, 1, 1000),
    lockWaitTimeoutSeconds: int("DATABASE_LOCK_WAIT_TIMEOUT_SECONDS", 5, 1, 3600),
    statementTimeoutMs: int("DATABASE_STATEMENT_TIMEOUT_MS", 10_000, 100, 3_600_000),
    acquireTimeoutMs: int("DATABASE_ACQUIRE_TIMEOUT_MS", 5_000, 100, 600_000),
    readBatchMax: int("DATABASE_READ_BATCH_MAX", 16, 1, 64),
    confirmGroupMax: int("DATABASE_CONFIRM_GROUP_MAX", 16, 1, 64),
    preparedStatements: p.check(() => onOff(env, "DATABASE_PREPARED_STATEMENTS", true)),
  };
  const raw = env["DATABASE_URL"]?.trim();
  if (raw === undefined || raw === "") {
    p.done();
    return { kind: "sqlite", file: path.join(dataDir, "entity-versions.db"), setting: "DATA_DIR" };
  }
  if (raw.startsWith("sqlite:")) {
    const file = raw.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
    if (file === "") p.problem(`DATABASE_URL "sqlite:" needs a file path, e.g. sqlite:./data/entity-versions.db.`);
    p.done();
    return { kind: "sqlite", file, setting: "DATABASE_URL" };
  }
  const url = mysqlUrl(raw, p);
  if (url !== undefined && production && url.password === "") {
    p.problem("NODE_ENV=production needs a password in DATABASE_URL (mysql://user:password@host/database): a database anyone on the network can log in to could rewrite every version.");
  }
  // Wrapped: undefined is a link without TLS, the wrapper's absence a query that could not be read.
  const link = url === undefined ? undefined : p.check(() => ({ tls: databaseTls(url) }));
  if (url !== undefined && production) {
    // Judged by its ssl-mode alone when another parameter was refused
    // (?charset=…): the link's own problem is named in the same start.
    const given = url.searchParams.get("ssl-mode")?.toUpperCase();
    const mode = sslModes.find((m) => m === (given ?? "DISABLED"));
    const tls = link !== undefined ? link.tls : mode === undefined || mode === "DISABLED" ? undefined : { mode };
    const problem = link === undefined && mode === undefined ? undefined : productionDatabaseLink(url, tls);
    if (problem !== undefined) p.problem(problem);
  }
  p.done();
  // Every read above succeeded (done() threw otherwise).
  const pool = read as AllRead<typeof read>;
  const tls = link!.tls;
  return { kind: "mysql", url: raw, ...pool, ...(tls === undefined ? {} : { tls }) };
}

/**
 * The values given under `name` spelled exactly so, as the Azure SDK reads
 * them (it compares names with case and trims the whole part), trimmed.
 */
function exactConnectionStringParts(connectionString: string, name: string): string[] {
  return connectionString
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part.startsWith(`${name}=`))
    .map((part) => part.slice(name.length + 1).trim());
}

function blob(env: Env, dataDir: string, production: boolean): BlobConfig {
  const p = problemsOf();
  const container = text(env, "AZURE_STORAGE_CONTAINER", "entity-versions");
  if (!/^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$/.test(container)) {
    p.problem(`AZURE_STORAGE_CONTAINER "${container}" is not a valid container name: 3 to 63 lowercase letters, digits and single hyphens.`);
  }
  // It names the container, not "on": left set after its one start, it
  // cannot let the database claim another empty container a later mistake
  // points the service at (that start is refused here).
  const claimEmptyName = optional(env, "CLAIM_EMPTY_CONTAINER");
  if (claimEmptyName !== undefined && claimEmptyName !== container) {
    p.problem(
      `CLAIM_EMPTY_CONTAINER names "${claimEmptyName}", but the container is "${container}" (AZURE_STORAGE_CONTAINER): it lets a database claim an empty container, and only the one it names; name this one, or unset it.`,
    );
  }
  const claimEmpty = claimEmptyName !== undefined;
  const connectionString = env["AZURE_STORAGE_CONNECTION_STRING"]?.trim();
  if (connectionString !== undefined && connectionString !== "") {
    // The SDK finds these only spelled exactly so, and takes a blank key
    // for none: otherwise it reads the string as a SAS one and fails at
    // start-up about a SharedAccessSignature nobody meant to give. One
    // spelled otherwise beside the exact one is refused too: the SAS
    // signer, which ignores case, might take it.
    const missing = ["AccountName", "AccountKey"].filter((name) => {
      const values = exactConnectionStringParts(connectionString, name);
      return values.length === 0 || values.some((value) => value === "") || connectionStringParts(connectionString, name).length !== values.length;
    });
    // The SDK trims a part, not the value after its "=": AccountName= acct
    // would become the host " acct.blob.…", refused as an "Invalid URL".
    const spaced = ["AccountName", "EndpointSuffix", "BlobEndpoint", "DefaultEndpointsProtocol"].filter((name) =>
      connectionString.split(";").some((part) => part.trim().startsWith(`${name}=`) && /^\s|\s$/.test(part.trim().slice(name.length + 1))),
    );
    if (spaced.length > 0) {
      p.problem(`AZURE_STORAGE_CONNECTION_STRING's ${spaced.join(" and ")} ${spaced.length === 1 ? "has" : "have"} spaces after "=": remove them (Name=value).`);
    }
    if (missing.length > 0) {
      p.problem(
        `AZURE_STORAGE_CONNECTION_STRING must carry AccountName and AccountKey, spelled exactly so, each with a value (the service signs SAS URLs with the key): ${missing.join(" and ")} ${missing.length === 1 ? "is" : "are"} missing, blank or spelled otherwise.`,
      );
    } else if (exactConnectionStringParts(connectionString, "AccountKey").some((key) => !/^[A-Za-z0-9+/]+={0,2}$/.test(key))) {
      // A placeholder left in (AccountKey=…) decodes to nothing: the SDK
      // then stops the start with a message naming no variable.
      p.problem("AZURE_STORAGE_CONNECTION_STRING's AccountKey is not a base64 key: paste the key the storage account's Access keys page shows.");
    }
    // The SDK reads a string as account-key only when it spells
    // "DefaultEndpointsProtocol=" so, and then needs EndpointSuffix or
    // BlobEndpoint; otherwise it fails at start-up naming some other part.
    const accountKeyForm = /(^|;)\s*DefaultEndpointsProtocol=/.test(connectionString);
    const endpoint = connectionStringParts(connectionString, "BlobEndpoint").length > 0 || connectionStringParts(connectionString, "EndpointSuffix").length > 0;
    if (!/^\s*UseDevelopmentStorage\s*=/i.test(connectionString) && (!accountKeyForm || !endpoint)) {
      p.problem(
        "AZURE_STORAGE_CONNECTION_STRING must say where the blobs are, written as the storage account's Access keys page gives it: DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net (or BlobEndpoint=https://… instead of EndpointSuffix), DefaultEndpointsProtocol spelled exactly so.",
      );
    }
    if (production) {
      // The Azure SDK replaces such a string with the emulator's own
      // settings (http, and its public key), whatever else it says.
      if (/^\s*UseDevelopmentStorage\s*=\s*true/i.test(connectionString)) {
        p.problem("NODE_ENV=production cannot use UseDevelopmentStorage=true (the storage emulator, over http, with its public key): set AZURE_STORAGE_CONNECTION_STRING to your storage account's.");
      }
      // Everyone has Azurite's key: whoever reaches that store could rewrite published packages.
      const devKey = Buffer.from(azuriteKey, "base64");
      if (connectionStringParts(connectionString, "AccountKey").some((key) => Buffer.from(key, "base64").equals(devKey))) {
        p.problem("NODE_ENV=production cannot use the Azure Storage emulator's public development key: set AZURE_STORAGE_CONNECTION_STRING to your storage account's.");
      }
      const plain =
        connectionStringParts(connectionString, "DefaultEndpointsProtocol").some((part) => part.toLowerCase() !== "https") ||
        connectionStringParts(connectionString, "BlobEndpoint").some((e) => !e.toLowerCase().startsWith("https:"));
      if (plain) {
        p.problem("NODE_ENV=production needs an https blob endpoint in AZURE_STORAGE_CONNECTION_STRING (DefaultEndpointsProtocol=https): SAS URLs and signed requests would travel in the clear.");
      }
    }
    p.done();
    return { kind: "azure", connectionString, container, claimEmpty };
  }
  const port = p.check(() => integer(env, "AZURITE_PORT", 0, 0, 65535));
  p.done();
  return { kind: "embedded-azurite", location: path.join(dataDir, "azurite"), port: port!, container, claimEmpty };
}

/**
 * A page-token secret (PAGE_TOKEN_SECRET, or the one more it opens with).
 * Such a secret is on every replica and guards only page positions; were
 * it the JWT key, whoever held it could sign any token.
 */
function pageTokenSecret(env: Env, name: string, production: boolean): string | undefined {
  const value = secret(env, name);
  if (production) {
    refuseTyped(name, value);
    if (value !== undefined && value === optional(env, "AUTH_JWT_SECRET")) {
      throw new ConfigError(
        `NODE_ENV=production needs a ${name} other than AUTH_JWT_SECRET: whoever holds a page-token secret could sign tokens, admin ones too (make a separate one with \`openssl rand -base64 32\`).`,
      );
    }
  }
  return value;
}

/** Whether NODE_ENV is production; any value but the three known ones is refused. */
function isProduction(env: Env): boolean {
  const nodeEnv = env["NODE_ENV"];
  // Compared exactly: "Production" silently meaning development would turn
  // on the development token and listen everywhere.
  if (nodeEnv !== undefined && nodeEnv !== "" && !(environments as readonly string[]).includes(nodeEnv)) {
    throw new ConfigError(`NODE_ENV must be one of ${environments.join(", ")} (exactly, lowercase) or unset; got "${nodeEnv}".`);
  }
  return nodeEnv === "production";
}

/**
 * The authentication settings alone, and where the development secret is
 * kept: what `npm run token` signs with. It needs none of the database or
 * storage settings a production server must have.
 */
export function loadAuthConfig(env: Env = process.env): { readonly auth: AuthConfig; readonly dataDir: string } {
  return Object.freeze({ auth: auth(env, isProduction(env)), dataDir: path.resolve(text(env, "DATA_DIR", "data")) });
}

/**
 * The database settings alone: what `npm run migrate:unlock` connects
 * with, the service's own TLS settings included.
 */
export function loadDatabaseConfig(env: Env = process.env): DatabaseConfig {
  const production = isProduction(env);
  return Object.freeze(database(env, path.resolve(text(env, "DATA_DIR", "data")), production));
}

/**
 * Reads and validates the configuration from the environment. The only place
 * that reads process.env: everything else receives the frozen result, so a
 * bad value stops the start with a message naming the variable instead of
 * failing on some later request.
 */
export function loadConfig(environment: Env = process.env): Config {
  // Each part is read even when another is wrong, so that one start names
  // every setting to fix, not one per attempt.
  const problems = problemsOf();
  // The names the configuration reads, set or not: a variable set under a
  // name close to one of them is a setting misnamed, which would be ignored.
  const readNames = new Set<string>();
  const env: Env = new Proxy(environment, {
    get: (target, key) => {
      if (typeof key === "string") readNames.add(key);
      return Reflect.get(target, key) as unknown;
    },
  });
  const read = problems.check;
  const dataDir = path.resolve(text(env, "DATA_DIR", "data"));
  const production = read(() => isProduction(env)) ?? false;
  if (production) {
    const needed: Array<[string, string]> = [
      ["DATABASE_URL", "mysql://user:password@host:3306/database"],
      ["AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…, your storage account's"],
      ["PAGE_TOKEN_SECRET", "32 or more random characters, e.g. `openssl rand -base64 32`"],
    ];
    const missing = needed.filter(([name]) => optional(env, name) === undefined);
    if (missing.length > 0) {
      problems.problem(
        `NODE_ENV=production needs ${missing.map(([name, form]) => `${name} (${form})`).join(", and ")}: the embedded defaults under ./data are for development only.`,
      );
    }
    if (optional(env, "DATABASE_URL")?.startsWith("sqlite:")) {
      problems.problem("NODE_ENV=production needs a mysql:// DATABASE_URL: SQLite is for development only.");
    }
  }
  const logLevel = read(() => {
    const level = text(env, "LOG_LEVEL", "info");
    if (!["fatal", "error", "warn", "info", "debug", "trace", "silent"].includes(level)) {
      throw new ConfigError(`LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent; got "${level}".`);
    }
    return level;
  });
  const maxRequestBytes = read(() => integer(env, "MAX_REQUEST_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024));
  // Read apart from the other HTTP limits: the sweep's check below needs it
  // even when one of those is wrong, so that one start names every setting to fix.
  const requestDeadlineMs = read(() => integer(env, "REQUEST_DEADLINE_MS", 30_000, 100, 600_000));
  const http = read(() => httpLimits(env, maxRequestBytes, production, requestDeadlineMs));
  const uploadUrlTtlSeconds = read(() => integer(env, "UPLOAD_URL_TTL_SECONDS", 900, 10, 7 * 24 * 3600));
  const orphanGraceSeconds = read(() => integer(env, "ORPHAN_GRACE_SECONDS", 24 * 3600, 1, 365 * 24 * 3600));
  if (production && requestDeadlineMs !== undefined && uploadUrlTtlSeconds !== undefined && orphanGraceSeconds !== undefined) {
    // An upload may land until its URL expires, and its confirm then take a
    // whole deadline: swept sooner, a client doing everything right is told
    // UPLOAD_NOT_FOUND. (Tests sweep sooner on purpose.)
    const confirmableSeconds = uploadUrlTtlSeconds + Math.ceil(requestDeadlineMs / 1000);
    if (orphanGraceSeconds < confirmableSeconds) {
      problems.problem(
        `NODE_ENV=production needs ORPHAN_GRACE_SECONDS (${orphanGraceSeconds}) of at least UPLOAD_URL_TTL_SECONDS plus REQUEST_DEADLINE_MS (${confirmableSeconds} s): uploads would be swept while their URLs still work.`,
      );
    }
  }
  const config = {
    production,
    http,
    auth: read(() => auth(env, production)),
    // Development serves this machine only, since it may run with the
    // development token; production listens on every interface.
    host: read(() => text(env, "HOST", production ? "0.0.0.0" : "127.0.0.1")),
    port: read(() => integer(env, "PORT", 8080, 0, 65535)),
    metricsPort: read(() => (optional(env, "METRICS_PORT") === undefined ? undefined : integer(env, "METRICS_PORT", 0, 0, 65535))),
    logLevel,
    dataDir,
    database: read(() => Object.freeze(database(env, dataDir, production))),
    blob: read(() => Object.freeze(blob(env, dataDir, production))),
    uploadUrlTtlSeconds,
    downloadUrlTtlSeconds: read(() => {
      const seconds = integer(env, "DOWNLOAD_URL_TTL_SECONDS", 300, 10, 7 * 24 * 3600);
      // A download URL outlives the access that got it: whoever was removed from the shares reads on until it expires.
      if (production && seconds > productionDownloadUrlTtlMaxSeconds) {
        throw new ConfigError(
          `NODE_ENV=production takes at most ${productionDownloadUrlTtlMaxSeconds} s of DOWNLOAD_URL_TTL_SECONDS (a download URL still reads its package that long after its holder lost access), got ${seconds}: lower it (300 by default).`,
        );
      }
      return seconds;
    }),
    confirmCopiesInTurn: read(() => onOff(env, "CONFIRM_COPIES_IN_TURN", true)),
    rpcInflationScope: read((): RpcInflationScope => {
      const raw = env["RPC_INFLATION_SCOPE"]?.trim().toLowerCase();
      if (raw === undefined || raw === "" || raw === "compressed") return "compressed";
      if (raw === "all") return "all";
      throw new ConfigError(`RPC_INFLATION_SCOPE must be compressed or all, got "${env["RPC_INFLATION_SCOPE"]}".`);
    }),
    shutdownTimeoutMs: read(() => integer(env, "SHUTDOWN_TIMEOUT_MS", 10_000, 0, 600_000)),
    // Behind a load balancer (production) it needs a few seconds to see a
    // replica going; a developer's Ctrl-C needs none.
    shutdownDrainMs: read(() => integer(env, "SHUTDOWN_DRAIN_MS", production ? 5_000 : 0, 0, 600_000)),
    blobTimeoutMs: read(() => integer(env, "BLOB_TIMEOUT_MS", 10_000, 100, 600_000)),
    blobDeletionIntervalMs: read(() => integer(env, "BLOB_DELETION_INTERVAL_MS", 30_000, 100, 3_600_000)),
    orphanGraceSeconds,
    sweepIntervalSeconds: read(() => integer(env, "SWEEP_INTERVAL_SECONDS", 3600, 1, 7 * 24 * 3600)),
    sweepUnrecordedPackages: read(() => onOff(env, "SWEEP_UNRECORDED_PACKAGES", true)),
    eventRetentionDays: read(() => integer(env, "EVENT_RETENTION_DAYS", 0, 0, 100 * 366)),
    pageTokenSecret: read(() => pageTokenSecret(env, "PAGE_TOKEN_SECRET", production)),
    pageTokenSecretPrevious: read(() => pageTokenSecret(env, "PAGE_TOKEN_SECRET_PREVIOUS", production)),
    limits: read(() => {
      const p = problemsOf();
      const int = wholeNumbers(env, p);
      const limits = {
        maxRequestBytes,
        // Confirm copies the package inside the store with Copy Blob From URL,
        // which takes sources of at most 256 MiB.
        maxPackageBytes: int("MAX_PACKAGE_BYTES", 256 * 1024 * 1024, 1, 256 * 1024 * 1024),
        // The most MySQL's MEDIUMTEXT column holds.
        maxPackageJsonBytes: int("MAX_PACKAGE_JSON_BYTES", 256 * 1024, 2, 16 * 1024 * 1024 - 1),
        // What a manifest costs to decode and encode grows with its values as
        // much as with its bytes; a large package.json has a few thousand.
        maxPackageJsonValues: int("MAX_PACKAGE_JSON_VALUES", 10_000, 1, 10_000_000),
        // As many distinct slugs of 63 characters as MySQL's TEXT column
        // holds in JSON (66 bytes each): past it, MySQL would refuse a
        // confirm SQLite accepts.
        maxServiceDependencies: int("MAX_SERVICE_DEPENDENCIES", 100, 0, 992),
        maxAccessEntries: int("MAX_ACCESS_ENTRIES", 1000, 1, 1_000_000),
        maxOpenUploadsPerEntity: int("MAX_OPEN_UPLOADS_PER_ENTITY", 1000, 1, 1_000_000),
        // A page of ListVersions holds at most this much package_json and
        // service_dependencies (one version at least), so that no request
        // can make the service read and send hundreds of megabytes at once.
        maxPageBytes: int("PAGE_MAX_BYTES", defaultPageMaxBytes, 64 * 1024, 256 * 1024 * 1024),
      };
      p.done();
      return Object.freeze(limits as AllRead<typeof limits>);
    }),
    // Read even when the HTTP settings are wrong: its own mistakes are named at the same start.
    watch: read(() => watch(env, http, production)),
    notices: [] as string[],
  };
  // Both listen on HOST: the second listener would find the port taken and
  // stop the start with a message naming no setting. (0 is any free port.)
  if (config.port !== undefined && config.metricsPort !== undefined && config.metricsPort !== 0 && config.metricsPort === config.port) {
    problems.problem(`METRICS_PORT must differ from PORT (both ${config.port}): set METRICS_PORT to a port of its own, or leave it unset to serve /metrics on PORT.`);
  }
  const set = Object.keys(environment).filter((name) => (environment[name] ?? "") !== "");
  for (const { name, meant, kind } of misnamedSettings(set, readNames)) {
    // Refused when the setting meant is not set too: its default, maybe a
    // looser bound than was meant, would apply. Only where no doubt is left
    // which setting was meant: a misspelling may be some other variable.
    const meantUnset = (environment[meant] ?? "").trim() === "";
    if (kind !== "spelling" && production && meantUnset) {
      const how = kind === "unit" ? "in the unit its name says, or seconds where it says none" : "names are read with their letter case, in capitals";
      problems.problem(`${name} is not a setting: ${meant} is (${how}). Set ${meant} instead.`);
    } else if (meant === "NODE_ENV" && meantUnset && (environment[name] ?? "").trim().toLowerCase() === "production") {
      // Meant as production, it would start as development: the
      // development token on, none of production's refusals made.
      problems.problem(`${name}=production is not a setting: NODE_ENV is. Set NODE_ENV=production; as it is, the service would start in development, with the development token.`);
    } else {
      config.notices.push(`${name} is not a setting and is ignored: did you mean ${meant}?`);
    }
  }
  Object.freeze(config.notices);
  problems.done(config.notices);
  // Every part was read without a problem, so none is undefined.
  return Object.freeze(config as { [K in keyof typeof config]: Exclude<(typeof config)[K], undefined> });
}

import { createRemoteJWKSet, customFetch, errors, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions, type JWTVerifyResult, jwtVerify } from "jose";
import { apiError } from "../errors/api-error.js";
import type { Authenticator, Caller } from "./caller.js";
import { claimsProblem } from "./claims.js";

/** How tokens are verified. */
export interface JwtOptions {
  /** HS256 shared secret. */
  readonly secret?: string;
  /** JWKS endpoint for RS256 and ES256 keys. */
  readonly jwksUrl?: string;
  readonly issuer?: string;
  readonly audience?: string;
  readonly clockSkewSeconds: number;
  /** Longest a token may live, from iat (or from now, without iat) to exp; undefined: no bound. */
  readonly maxTokenLifetimeSeconds?: number | undefined;
  /** Least time between two JWKS fetches (an unknown kid refetches after it). */
  readonly jwksCooldownSeconds: number;
  /** Longest the key set is used before it is fetched again: how soon a withdrawn key stops verifying. */
  readonly jwksMaxAgeSeconds: number;
  /** How long a verified token is trusted without checking its signature again; 0: always check. */
  readonly tokenCacheSeconds: number;
  readonly jwksTimeoutMs?: number;
}

/** A roles or orgs claim, once claimsProblem has found none. */
const stringList = (payload: JWTPayload, claim: string): string[] => (payload[claim] as string[] | undefined) ?? [];

function mapJoseError(error: unknown): Error {
  if (error instanceof errors.JWTExpired) return apiError("TOKEN_EXPIRED", {}, { cause: error });
  if (error instanceof errors.JWTClaimValidationFailed) {
    // A time in the future: the token is not valid yet. A time that is no number is a malformed claim.
    if ((error.claim === "nbf" || error.claim === "iat") && error.reason === "check_failed") return apiError("TOKEN_NOT_YET_VALID", {}, { cause: error });
    if (error.claim === "iss") return apiError("TOKEN_WRONG_ISSUER", {}, { cause: error });
    if (error.claim === "aud") return apiError("TOKEN_WRONG_AUDIENCE", {}, { cause: error });
    return apiError("TOKEN_CLAIMS_INVALID", { problem: `${error.claim} ${error.reason === "missing" ? "is missing" : "is not valid"}` }, { cause: error });
  }
  // fetchKeySet has refused a set jose would find malformed: jose's
  // JWKSInvalid is then about the token's own key (one that is no public key).
  if (error instanceof errors.JWSSignatureVerificationFailed || error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSInvalid) {
    return apiError("TOKEN_BAD_SIGNATURE", {}, { cause: error });
  }
  // Only a key set that could not be had tells the caller to retry: a 503
  // for anything else would have clients retry a token that never verifies.
  if (error instanceof KeySetUnavailable || error instanceof errors.JWKSTimeout) {
    return apiError("AUTH_KEYS_UNAVAILABLE", {}, { cause: error });
  }
  // jose and WebCrypto refuse a key they will not verify with (an RSA key
  // under 2048 bits, a key of another type) with a TypeError or a
  // DOMException: the token names a key this service does not trust.
  if (error instanceof TypeError || error instanceof DOMException) return apiError("TOKEN_BAD_SIGNATURE", {}, { cause: error });
  // Anything else is no verdict on the token: answered INTERNAL and logged.
  if (!(error instanceof errors.JOSEError)) return error instanceof Error ? error : new Error(String(error));
  return apiError("TOKEN_MALFORMED", {}, { cause: error });
}

/** `Bearer <jwt>`, the token captured. */
const bearer = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+) *$/i;

/**
 * What is wrong with an Authorization header that is not `Bearer <jwt>`:
 * a token sent without its scheme, another scheme, or a bearer token that
 * is not a JWT, each said as such, since the fix differs.
 */
function malformedHeader(header: string): string {
  // "Bearer" alone: what `Bearer $TOKEN` sends with TOKEN unset.
  if (/^bearer\s*$/i.test(header)) return "The Authorization header says Bearer but carries no token (is the variable holding it set?)";
  const scheme = /^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*) /.exec(header)?.[1];
  if (scheme === undefined) return "The Authorization header has no scheme";
  // Never quoted when it may be the token itself (sent without its scheme,
  // something after it): an error body travels to logs a token must not.
  if (scheme.includes(".") || scheme.length > 32) return "The Authorization header starts with something other than a scheme (the token itself, sent without `Bearer `?)";
  if (scheme.toLowerCase() !== "bearer") return `The Authorization header uses the ${scheme} scheme, which this service does not take`;
  return "The bearer token is not a JWT (three base64url parts separated by dots)";
}

/** Largest key set read, in bytes: a few dozen keys take a few KB. */
const maxKeySetBytes = 1 << 20;

/**
 * Least time between a failed key set fetch and the next. With
 * AUTH_JWKS_COOLDOWN_SECONDS=0 a key server that is down would otherwise
 * be asked again by every call naming a key not yet fetched.
 */
const leastFetchBackOffMs = 1_000;

/**
 * The key set could not be fetched or read: the one failure that is not
 * the token's, answered AUTH_KEYS_UNAVAILABLE (retry) rather than 401.
 */
export class KeySetUnavailable extends Error {
  override readonly name = "KeySetUnavailable";
}

/** The part of a pino logger the authenticator uses. */
export interface KeySetLogger {
  error(obj: object, msg: string): void;
}

/** A URL as it may be logged: credentials and query (which may hold a key) left out. */
function loggableUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname}${parsed.search === "" ? "" : "?…"}`;
}

/** `text` with `url` (which may hold a key in its query) written as it may be logged. */
function scrubbed(text: string, url: string): string {
  const loggable = loggableUrl(url);
  return text.split(url).join(loggable).split(new URL(url).href).join(loggable);
}

/**
 * A copy of an error fit for the log: its messages (and its causes', a few
 * deep) with `url` scrubbed, its name and code kept. undici's messages may
 * quote the whole URL.
 */
function scrubbedError(error: unknown, url: string, depth = 0): unknown {
  if (!(error instanceof Error) || depth > 3) return error;
  const copy = new Error(scrubbed(error.message, url), error.cause === undefined ? {} : { cause: scrubbedError(error.cause, url, depth + 1) });
  copy.name = error.name;
  const { code } = error as { code?: unknown };
  if (code !== undefined) Object.assign(copy, { code });
  copy.stack = `${copy.name}: ${copy.message}`;
  return copy;
}

/** What identifies a JWK's key pair: its public numbers (RSA n and e; EC and OKP crv, x and y), whichever half the member holds. */
function publicPart(key: Record<string, unknown>): string {
  return JSON.stringify([key["kty"], key["n"], key["e"], key["crv"], key["x"], key["y"]]);
}

/**
 * Fetches the key set for jose, and refuses whatever jose could not use
 * (an answer other than 200, a redirect, which jose does not follow, a body
 * over maxKeySetBytes, no JSON, no key set) with a KeySetUnavailable that
 * says which, so that the log tells an operator what the key server did.
 * It stops reading past maxKeySetBytes: a misbehaving key server cannot
 * make the process hold its whole answer. Members that are private keys
 * are left out of what jose sees, and named in `leakedKids`.
 */
async function fetchKeySet(url: string, init: RequestInit, timeoutMs: number): Promise<{ readonly response: Response; readonly leakedKids: readonly string[] }> {
  const where = `the JSON Web Key Set at ${loggableUrl(url)}`;
  const failed = (what: string, cause?: unknown) => new KeySetUnavailable(`${where} ${scrubbed(what, url)}`, cause === undefined ? {} : { cause: scrubbedError(cause, url) });
  const timedOut = (error: unknown) => error instanceof DOMException && error.name === "TimeoutError";
  // undici says only "fetch failed"; what failed (ECONNREFUSED, a certificate) is its cause.
  const why = (error: unknown) => {
    const { message, cause } = error as Error;
    return cause instanceof Error ? `${message} (${cause.message})` : String(message);
  };
  let response: Response;
  try {
    response = await fetch(url, init);
  } catch (error) {
    throw timedOut(error) ? failed(`did not answer within ${timeoutMs} ms`, error) : failed(`could not be fetched: ${why(error)}`, error);
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    const location = response.headers.get("location");
    if (response.status >= 300 && response.status < 400 && location !== null) {
      let target: string;
      try {
        target = loggableUrl(new URL(location, url).href);
      } catch {
        throw failed(`answered ${response.status}, a redirect to a Location that is not a URL: fix the key server, or set AUTH_JWKS_URL to where the keys are`);
      }
      throw failed(`answered ${response.status}, a redirect to ${target}, which is not followed: set AUTH_JWKS_URL to the address it names`);
    }
    throw failed(`answered HTTP ${response.status} where 200 was expected`);
  }
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    if (response.body !== null) {
      for await (const chunk of response.body) {
        bytes += chunk.byteLength;
        // Leaving the loop cancels the stream: the rest is never read.
        if (bytes > maxKeySetBytes) throw failed(`is larger than ${maxKeySetBytes} bytes`);
        chunks.push(chunk);
      }
    }
  } catch (error) {
    if (error instanceof KeySetUnavailable) throw error;
    throw timedOut(error) ? failed(`was not read whole within ${timeoutMs} ms`, error) : failed(`could not be read whole: ${why(error)}`, error);
  }
  const body = Buffer.concat(chunks);
  let set: unknown;
  try {
    // As response.json() reads it (a leading byte order mark dropped), which jose used.
    set = JSON.parse(new TextDecoder().decode(body));
  } catch (error) {
    throw failed("answered a body that is not JSON", error);
  }
  // What jose takes for a key set; anything else it would refuse once this returned.
  const isObject = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value);
  const keys = isObject(set) ? (set as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(keys) || !keys.every(isObject)) throw failed('answered JSON that is not a key set (an object whose "keys" is a list of objects)');
  // A member with a private part ("d") is a signing key anyone who reads
  // the set can sign with: never trusted, nor is its public half where the
  // set publishes that too, so its tokens are refused as signed by an
  // unknown key, and the operator is told (jose would refuse it only when
  // a token names it, in a way that reads as an outage). A "d" of null is
  // a serializer's way of writing none: left out, as jose would take the
  // key for a private one.
  const nullD = (keys as Array<Record<string, unknown>>).some((key) => key["d"] === null);
  const members = (keys as Array<Record<string, unknown>>).map((key) => (key["d"] === null ? Object.fromEntries(Object.entries(key).filter(([name]) => name !== "d")) : key));
  const leaked = members.filter((key) => key["d"] !== undefined);
  if (leaked.length === 0 && !nullD) return { response: new Response(body, { status: 200, headers: response.headers }), leakedKids: [] };
  const leakedPublic = new Set(leaked.map(publicPart));
  const kept = { ...(set as object), keys: members.filter((key) => !leaked.includes(key) && !leakedPublic.has(publicPart(key))) };
  const headers = new Headers(response.headers);
  headers.delete("content-length");
  return { response: new Response(JSON.stringify(kept), { status: 200, headers }), leakedKids: leaked.map((key) => (typeof key["kid"] === "string" ? key["kid"] : "(no kid)")) };
}

/** How many verified tokens are remembered. */
const cacheSize = 10_000;
/**
 * Longest token remembered, in characters. An ordinary token is well under
 * 2 KB; without a bound, an issuer that puts hundreds of organizations in
 * `orgs` would let 10,000 distinct tokens hold gigabytes. A longer token
 * is verified on every call instead.
 */
const cacheableTokenChars = 4096;

/**
 * Authenticates `Authorization: Bearer <jwt>` (HTTP) or `authorization`
 * metadata (gRPC) with jose: HS256 with a shared secret and/or RS256/ES256
 * with keys from a JWKS URL (cached; an unknown kid refetches). Checks exp
 * (required), nbf, iss and aud with a small clock skew. `sub` is the user,
 * `roles` and `orgs` arrays of ids. The token itself never leaves this
 * function: errors name the cause only.
 */
export class JwtAuthenticator implements Authenticator {
  readonly #key: JWTVerifyGetKey;
  readonly #algorithms: string[];
  readonly #options: JwtOptions;
  readonly #verified = new Map<string, { caller: Caller; until: number }>();

  /**
   * `log` hears of each failed key set fetch, with its cause: at most one
   * per AUTH_JWKS_COOLDOWN_SECONDS, however many calls it fails.
   */
  constructor(options: JwtOptions, log: KeySetLogger) {
    if (options.secret === undefined && options.jwksUrl === undefined) throw new Error("JwtAuthenticator needs a secret or a JWKS URL");
    this.#options = options;
    // Imported once: given raw bytes, jose imports a WebCrypto key on every verification.
    const secret =
      options.secret === undefined
        ? undefined
        : crypto.subtle.importKey("raw", new TextEncoder().encode(options.secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    const timeoutMs = options.jwksTimeoutMs ?? 5_000;
    const backOffMs = Math.max(options.jwksCooldownSeconds * 1000, leastFetchBackOffMs);
    // jose waits AUTH_JWKS_COOLDOWN_SECONDS only after a fetch that
    // succeeded: while the key server fails, every call naming an unknown
    // kid, and once the set is stale every call, would fetch again. After a
    // failure, calls that would fetch are refused at once until backOffMs
    // has passed, and only the fetch that failed is logged.
    let retryAt = 0;
    let lastFailure: unknown;
    const fetchOrBackOff = async (url: string, init: RequestInit): Promise<Response> => {
      if (Date.now() < retryAt) {
        throw new KeySetUnavailable(`the JSON Web Key Set at ${loggableUrl(url)} failed to load and is not fetched again for ${Math.ceil((retryAt - Date.now()) / 1000)} s`, { cause: lastFailure });
      }
      try {
        const { response, leakedKids } = await fetchKeySet(url, init, timeoutMs);
        if (leakedKids.length > 0) {
          log.error(
            { jwksUrl: loggableUrl(url), kids: leakedKids },
            `the token signing keys (JWKS) publish ${leakedKids.length === 1 ? "a private key" : `${leakedKids.length} private keys`} (kid ${leakedKids.join(", ")}): anyone who reads them can sign tokens, so they are not used and tokens they sign are refused TOKEN_BAD_SIGNATURE; publish only the public part, and rotate the key`,
          );
        }
        return response;
      } catch (thrown) {
        // Whatever stopped the fetch is the key set's failure, never the token's.
        const error = thrown instanceof KeySetUnavailable ? thrown : new KeySetUnavailable(`the JSON Web Key Set at ${loggableUrl(url)} could not be fetched`, { cause: scrubbedError(thrown, url) });
        retryAt = Date.now() + backOffMs;
        lastFailure = error;
        log.error(
          { err: error, jwksUrl: loggableUrl(url) },
          `fetching the token signing keys (JWKS) failed: tokens that need them fetched are answered AUTH_KEYS_UNAVAILABLE, and the next fetch is in ${backOffMs / 1000} s; check AUTH_JWKS_URL and the key server`,
        );
        throw error;
      }
    };
    const jwks =
      options.jwksUrl === undefined
        ? undefined
        : createRemoteJWKSet(new URL(options.jwksUrl), {
            cooldownDuration: options.jwksCooldownSeconds * 1000,
            cacheMaxAge: options.jwksMaxAgeSeconds * 1000,
            timeoutDuration: timeoutMs,
            [customFetch]: fetchOrBackOff,
          });
    this.#algorithms = [...(secret === undefined ? [] : ["HS256"]), ...(jwks === undefined ? [] : ["RS256", "ES256"])];
    this.#key = async (header, token) => {
      if (header.alg === "HS256" && secret !== undefined) return await secret;
      if (jwks !== undefined) {
        try {
          return await jwks(header, token);
        } catch (error) {
          // fetchKeySet leaves jose nothing to refuse, but should jose still
          // report a key set it could not use as a bare JOSEError, it would
          // read as a malformed token: every holder of a good token would be
          // told to drop it. Only a key set without the token's key speaks of the token.
          if (error instanceof errors.JOSEError && error.code === "ERR_JOSE_GENERIC") {
            throw new KeySetUnavailable(`the JSON Web Key Set could not be read: ${error.message}`, { cause: error });
          }
          throw error;
        }
      }
      throw new errors.JOSEAlgNotAllowed(`alg ${header.alg} is not accepted`);
    };
  }

  async authenticate(header: string | null): Promise<Caller> {
    if (header === null || header.trim() === "") throw apiError("AUTH_REQUIRED", {});
    const match = bearer.exec(header);
    if (match === null) throw apiError("TOKEN_MALFORMED", { problem: malformedHeader(header) });
    const token = match[1]!;
    return this.#remembered(token) ?? (await this.#verify(token));
  }

  known(header: string | null): Caller | undefined {
    const match = header === null ? null : bearer.exec(header);
    return match === null ? undefined : this.#remembered(match[1]!);
  }

  /** A token verified within AUTH_TOKEN_CACHE_SECONDS and not yet expired: its caller, kept as the most recently used. */
  #remembered(token: string): Caller | undefined {
    const known = this.#verified.get(token);
    if (known === undefined) return undefined;
    this.#verified.delete(token);
    if (Date.now() > known.until) return undefined;
    this.#verified.set(token, known);
    return known.caller;
  }

  /**
   * Verifies a token with the key its header names. A token without `kid`
   * matches every key of its algorithm in the set, and while an issuer
   * rotates there are two: jose then hands over the candidates, to be
   * tried in turn (as its documentation says), so that such tokens keep
   * working through a rotation rather than being refused as malformed.
   */
  async #verifyWithAnyKey(token: string, options: JWTVerifyOptions): Promise<JWTVerifyResult> {
    try {
      return await jwtVerify(token, this.#key, options);
    } catch (error) {
      if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error;
      for await (const key of error) {
        try {
          return await jwtVerify(token, key, options);
        } catch (inner) {
          // The claims are checked only once a key verified the signature:
          // that is the token's key, and what it says stands. Anything else
          // (a bad signature, a key jose will not use) means another key.
          if (inner instanceof errors.JWTExpired || inner instanceof errors.JWTClaimValidationFailed) throw inner;
        }
      }
      throw new errors.JWSSignatureVerificationFailed();
    }
  }

  async #verify(token: string): Promise<Caller> {
    let payload: JWTPayload;
    try {
      ({ payload } = await this.#verifyWithAnyKey(token, {
        algorithms: this.#algorithms,
        clockTolerance: this.#options.clockSkewSeconds,
        requiredClaims: ["exp", "sub"],
        ...(this.#options.issuer === undefined ? {} : { issuer: this.#options.issuer }),
        ...(this.#options.audience === undefined ? {} : { audience: this.#options.audience }),
      }));
    } catch (error) {
      throw mapJoseError(error);
    }
    // jose checks iat only with maxTokenAge, and then requires it: a token
    // minted in the future (beyond the skew) is refused here, with or without a lifetime bound.
    const now = Math.floor(Date.now() / 1000);
    const skew = this.#options.clockSkewSeconds;
    if (payload.iat !== undefined && payload.iat > now + skew) throw apiError("TOKEN_NOT_YET_VALID", {});
    const max = this.#options.maxTokenLifetimeSeconds;
    if (max !== undefined && (payload.exp ?? Infinity) - (payload.iat ?? now) > max + skew) {
      throw apiError("TOKEN_LIFETIME_TOO_LONG", { maxSeconds: max });
    }
    const problem = claimsProblem(payload);
    if (problem !== undefined) throw apiError("TOKEN_CLAIMS_INVALID", { problem });
    // exp is required, so jose has checked it is a number.
    const expiresAt = (payload.exp ?? 0) * 1000 + skew * 1000;
    const caller: Caller = { id: payload.sub!, roles: stringList(payload, "roles"), orgs: stringList(payload, "orgs"), expiresAt };
    if (this.#options.tokenCacheSeconds > 0 && token.length <= cacheableTokenChars) {
      const until = Math.min(expiresAt, Date.now() + this.#options.tokenCacheSeconds * 1000);
      this.#verified.set(token, { caller, until });
      if (this.#verified.size > cacheSize) this.#verified.delete(this.#verified.keys().next().value!);
    }
    return caller;
  }
}

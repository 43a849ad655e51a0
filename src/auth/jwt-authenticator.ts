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
  if (error instanceof errors.JWSSignatureVerificationFailed || error instanceof errors.JWKSNoMatchingKey) {
    return apiError("TOKEN_BAD_SIGNATURE", {}, { cause: error });
  }
  if (error instanceof errors.JWKSTimeout || error instanceof errors.JWKSInvalid || (error instanceof Error && !(error instanceof errors.JOSEError))) {
    // Network failures of the JWKS fetch surface as plain errors.
    return apiError("AUTH_KEYS_UNAVAILABLE", {}, { cause: error });
  }
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
 * fetch for the key set that stops reading past maxKeySetBytes, so that a
 * misbehaving key server cannot make the process hold its whole answer.
 */
async function boundedFetch(url: string, init: RequestInit): Promise<Response> {
  const response = await fetch(url, init);
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  if (response.body !== null) {
    for await (const chunk of response.body) {
      bytes += chunk.byteLength;
      if (bytes > maxKeySetBytes) {
        await response.body.cancel();
        throw new Error(`the JSON Web Key Set at ${url} is larger than ${maxKeySetBytes} bytes`);
      }
      chunks.push(chunk);
    }
  }
  return new Response(Buffer.concat(chunks), { status: response.status, headers: response.headers });
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

  constructor(options: JwtOptions) {
    if (options.secret === undefined && options.jwksUrl === undefined) throw new Error("JwtAuthenticator needs a secret or a JWKS URL");
    this.#options = options;
    // Imported once: given raw bytes, jose imports a WebCrypto key on every verification.
    const secret =
      options.secret === undefined
        ? undefined
        : crypto.subtle.importKey("raw", new TextEncoder().encode(options.secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    const jwks =
      options.jwksUrl === undefined
        ? undefined
        : createRemoteJWKSet(new URL(options.jwksUrl), {
            cooldownDuration: options.jwksCooldownSeconds * 1000,
            cacheMaxAge: options.jwksMaxAgeSeconds * 1000,
            timeoutDuration: options.jwksTimeoutMs ?? 5_000,
            [customFetch]: boundedFetch,
          });
    this.#algorithms = [...(secret === undefined ? [] : ["HS256"]), ...(jwks === undefined ? [] : ["RS256", "ES256"])];
    this.#key = async (header, token) => {
      if (header.alg === "HS256" && secret !== undefined) return await secret;
      if (jwks !== undefined) {
        try {
          return await jwks(header, token);
        } catch (error) {
          // jose reports a key set answered with an error status, or with a
          // body that is no JSON, as a bare JOSEError, which would read as a
          // malformed token: every holder of a good token would be told to
          // drop it. Only a key set without the token's key speaks of the token.
          if (error instanceof errors.JOSEError && error.code === "ERR_JOSE_GENERIC") {
            throw new Error(`the JSON Web Key Set could not be read: ${error.message}`, { cause: error });
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

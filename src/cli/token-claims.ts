import { decodeJwt, type JWTPayload } from "jose";
import { CliError } from "./cli-error.js";
import { ExitCode } from "./exit-codes.js";

/** What `whoami` says about a token, read without verifying it. */
export interface TokenSummary {
  readonly claims: JWTPayload;
  readonly sub: string | undefined;
  readonly roles: string[];
  readonly orgs: string[];
  /** `exp` as an ISO 8601 time, when the token has one. */
  readonly expiresAt: string | undefined;
  readonly expired: boolean;
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : []);

/**
 * Decodes a JWT's claims locally (the payload is base64url JSON), without
 * the signing secret: enough to see who the CLI will act as and whether the
 * token has expired. The service still verifies the signature on every
 * call; a token this accepts may still be refused there.
 */
export function summariseToken(token: string, now: Date = new Date()): TokenSummary {
  let claims: JWTPayload;
  try {
    claims = decodeJwt(token);
  } catch (error) {
    const err = new CliError(
      `the token is not a JWT (${error instanceof Error ? error.message : String(error)}): check --token or ENTITY_VERSIONS_TOKEN.`,
      "TOKEN_MALFORMED",
      ExitCode.noAccess,
    );
    err.cause = error;
    throw err;
  }
  // An exp no date can hold (past year 275760, or Infinity from 1e400) is no expiry time: the token lacks a valid exp.
  const exp = typeof claims.exp === "number" && Number.isFinite(new Date(claims.exp * 1000).getTime()) ? claims.exp : undefined;
  return {
    claims,
    sub: typeof claims.sub === "string" ? claims.sub : undefined,
    roles: strings(claims["roles"]),
    orgs: strings(claims["orgs"]),
    expiresAt: exp === undefined ? undefined : new Date(exp * 1000).toISOString(),
    expired: exp !== undefined && exp * 1000 <= now.getTime(),
  };
}

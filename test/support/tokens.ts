// Tokens for tests, signed with the test services' secret (or another, to fail).
import { SignJWT } from "jose";

/** The HS256 secret, issuer and audience every test service is configured with. */
export const testAuth = Object.freeze({
  secret: "test-jwt-secret-0123456789abcdef0123456789",
  issuer: "https://issuer.test",
  audience: "entity-versions-test",
});

/** Claims of a test token; anything omitted is valid. */
export interface TestClaims {
  sub?: string;
  roles?: string[];
  orgs?: string[];
  secret?: string;
  issuer?: string;
  audience?: string;
  /** Expiry, seconds from now (negative: already expired). */
  expiresIn?: number;
  notBeforeIn?: number;
  /** Issued-at, seconds from now (positive: in the future). */
  issuedAtIn?: number;
}

/** A signed HS256 token for the test services. */
export async function token(claims: TestClaims = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  let jwt = new SignJWT({ roles: claims.roles ?? ["publisher"], orgs: claims.orgs ?? [] })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(claims.sub ?? "tester")
    .setIssuer(claims.issuer ?? testAuth.issuer)
    .setAudience(claims.audience ?? testAuth.audience)
    .setIssuedAt(now + (claims.issuedAtIn ?? 0))
    .setExpirationTime(now + (claims.expiresIn ?? 3600));
  if (claims.notBeforeIn !== undefined) jwt = jwt.setNotBefore(now + claims.notBeforeIn);
  return jwt.sign(new TextEncoder().encode(claims.secret ?? testAuth.secret));
}

/** `authorization` header value for a token. */
export const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

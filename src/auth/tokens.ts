import { SignJWT } from "jose";

/** What a minted token says. */
export interface TokenClaims {
  readonly sub: string;
  readonly roles?: readonly string[];
  readonly orgs?: readonly string[];
  readonly issuer?: string;
  readonly audience?: string;
  /** Lifetime in seconds. */
  readonly ttlSeconds: number;
}

/** Mints an HS256 token: the development token, `npm run token`, and the tests. */
export async function mintToken(secret: string, claims: TokenClaims): Promise<string> {
  let jwt = new SignJWT({ roles: [...(claims.roles ?? [])], orgs: [...(claims.orgs ?? [])] })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(claims.sub)
    .setIssuedAt()
    .setExpirationTime(`${claims.ttlSeconds}s`);
  if (claims.issuer !== undefined) jwt = jwt.setIssuer(claims.issuer);
  if (claims.audience !== undefined) jwt = jwt.setAudience(claims.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}

import { ConnectError } from "@connectrpc/connect";
import { SignJWT } from "jose";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { JwtAuthenticator } from "../../src/auth/jwt-authenticator.js";
import { reasonOf } from "../../src/errors/api-error.js";
import { testAuth, token } from "../support/tokens.js";

const authenticator = () =>
  new JwtAuthenticator({
    secret: testAuth.secret,
    issuer: testAuth.issuer,
    audience: testAuth.audience,
    clockSkewSeconds: 0,
    jwksCooldownSeconds: 30,
    jwksMaxAgeSeconds: 60,
    tokenCacheSeconds: 30,
  });

test("a verified token is remembered; one too long to remember is verified on every call", async () => {
  const auth = authenticator();
  const small = `Bearer ${await token({ sub: "small", orgs: ["acme"] })}`;
  assert.is(auth.known(small), undefined, "not yet verified");
  assert.is((await auth.authenticate(small)).id, "small");
  assert.is(auth.known(small)?.id, "small", "remembered");
  // Hundreds of organizations: a token of tens of KB, which 10,000 entries would turn into gigabytes.
  const big = `Bearer ${await token({ sub: "big", orgs: Array.from({ length: 200 }, (_, i) => `org-${i}-${"x".repeat(40)}`) })}`;
  assert.ok(big.length > 8000);
  assert.is((await auth.authenticate(big)).orgs.length, 200, "accepted");
  assert.is(auth.known(big), undefined, "not remembered");
});

test("an nbf or iat that is no number is a malformed claim, not a token from the future", async () => {
  const auth = authenticator();
  const now = Math.floor(Date.now() / 1000);
  for (const claims of [{ nbf: "x" }, { iat: "x" }] as Record<string, unknown>[]) {
    const jwt = await new SignJWT({ ...claims, roles: ["publisher"] })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("alice")
      .setIssuer(testAuth.issuer)
      .setAudience(testAuth.audience)
      .setExpirationTime(now + 600)
      .sign(new TextEncoder().encode(testAuth.secret));
    try {
      await auth.authenticate(`Bearer ${jwt}`);
      assert.unreachable(JSON.stringify(claims));
    } catch (error) {
      assert.instance(error, ConnectError);
      assert.is(reasonOf(error as ConnectError), "TOKEN_CLAIMS_INVALID", JSON.stringify(claims));
      assert.match((error as ConnectError).rawMessage, `${Object.keys(claims)[0]} is not valid`);
    }
  }
  // A real time in the future still is.
  const future = `Bearer ${await token({ sub: "alice", notBeforeIn: 3600 })}`;
  try {
    await auth.authenticate(future);
    assert.unreachable();
  } catch (error) {
    assert.is(reasonOf(error as ConnectError), "TOKEN_NOT_YET_VALID");
  }
});

test.run();

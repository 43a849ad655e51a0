import { test } from "uvu";
import * as assert from "uvu/assert";
import { JwtAuthenticator } from "../../src/auth/jwt-authenticator.js";
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

test.run();

import { ConnectError } from "@connectrpc/connect";
import { generateKeyPairSync } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
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

/** An authenticator whose key set is served, as `status` and `body`, by a local server while `use` runs. */
async function withKeySet(status: number, body: string, use: (auth: JwtAuthenticator) => Promise<void>): Promise<void> {
  const jwks = http.createServer((_req, res) => res.writeHead(status, { "content-type": "application/json" }).end(body));
  await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve));
  try {
    await use(
      new JwtAuthenticator({
        jwksUrl: `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`,
        clockSkewSeconds: 0,
        jwksCooldownSeconds: 0,
        jwksMaxAgeSeconds: 60,
        tokenCacheSeconds: 0,
      }),
    );
  } finally {
    await new Promise((resolve) => jwks.close(resolve));
  }
}

test("a key set answered with an error status or a body that is no JSON is AUTH_KEYS_UNAVAILABLE, not a malformed token", async () => {
  const answers: Array<[number, string]> = [
    [503, "busy"],
    [200, "{ not json"],
    // Well-formed but past the bound: never held whole.
    [200, JSON.stringify({ keys: [], padding: "x".repeat(2 << 20) })],
  ];
  for (const [status, body] of answers) {
    await withKeySet(status, body, async (auth) => {
      const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
      const rsToken = `${b64({ alg: "RS256", kid: "k1", typ: "JWT" })}.${b64({ sub: "x", exp: Math.floor(Date.now() / 1000) + 600 })}.${"A".repeat(43)}`;
      try {
        await auth.authenticate(`Bearer ${rsToken}`);
        assert.unreachable(`${status} ${body.slice(0, 20)}`);
      } catch (error) {
        assert.instance(error, ConnectError);
        assert.is(reasonOf(error as ConnectError), "AUTH_KEYS_UNAVAILABLE", `${status} ${body.slice(0, 20)}`);
      }
    });
  }
});

test("a token without kid verifies while the key set holds several keys of its algorithm (a rotation), each tried in turn", async () => {
  const { privateKey: first, publicKey: firstPublic } = await generateKeyPair("RS256", { extractable: true });
  const { publicKey: second } = await generateKeyPair("RS256", { extractable: true });
  // And a legacy key jose will not verify with (under 2048 bits): passed over, not taken for the key set failing.
  const legacy = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey.export({ format: "jwk" });
  const keys = [
    { ...legacy, alg: "RS256", use: "sig", kid: "legacy" },
    { ...(await exportJWK(second)), alg: "RS256", use: "sig", kid: "next" },
    { ...(await exportJWK(firstPublic)), alg: "RS256", use: "sig", kid: "current" },
  ];
  await withKeySet(200, JSON.stringify({ keys }), async (auth) => {
    const signed = await new SignJWT({ sub: "alice" }).setProtectedHeader({ alg: "RS256" }).setExpirationTime("5m").sign(first);
    assert.is((await auth.authenticate(`Bearer ${signed}`)).id, "alice");
    // Signed by neither key: a bad signature, not a malformed token.
    const { privateKey: stranger } = await generateKeyPair("RS256");
    const forged = await new SignJWT({ sub: "alice" }).setProtectedHeader({ alg: "RS256" }).setExpirationTime("5m").sign(stranger);
    const refused = await auth.authenticate(`Bearer ${forged}`).then(() => undefined, (e: unknown) => e);
    assert.instance(refused, ConnectError);
    assert.is(reasonOf(refused as ConnectError), "TOKEN_BAD_SIGNATURE");
  });
});

test.run();

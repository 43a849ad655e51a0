import { ConnectError } from "@connectrpc/connect";
import { generateKeyPairSync } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { JwtAuthenticator } from "../../src/auth/jwt-authenticator.js";
import { reasonOf } from "../../src/errors/api-error.js";
import { memoryLogger } from "../support/service.js";
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
  }, memoryLogger().logger);

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
async function withKeySet(status: number, body: string, use: (auth: JwtAuthenticator, log: () => string) => Promise<void>): Promise<void> {
  const jwks = http.createServer((_req, res) => res.writeHead(status, { "content-type": "application/json" }).end(body));
  await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve));
  const log = memoryLogger();
  try {
    await use(
      new JwtAuthenticator({
        jwksUrl: `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks.json`,
        clockSkewSeconds: 0,
        jwksCooldownSeconds: 0,
        jwksMaxAgeSeconds: 60,
        tokenCacheSeconds: 0,
      }, log.logger),
      log.text,
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

/** A key server that answers what `answer` says at the time of each request, and counts them. */
async function keyServer(): Promise<{ url: string; fetches: () => number; answer: (status: number, body?: string, headers?: Record<string, string>) => void; hang: () => void; close: () => Promise<void> }> {
  let fetches = 0;
  let reply: ((res: http.ServerResponse) => void) | undefined;
  const server = http.createServer((_req, res) => {
    fetches++;
    reply?.(res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    fetches: () => fetches,
    answer: (status, body = "", headers = {}) => (reply = (res) => res.writeHead(status, { "content-type": "application/json", ...headers }).end(body)),
    hang: () => (reply = undefined),
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const reasonFrom = (auth: JwtAuthenticator, header: string) =>
  auth.authenticate(header).then(
    () => "ok",
    (e: unknown) => (e instanceof ConnectError ? reasonOf(e) : undefined) ?? String(e),
  );

test("after a failed key set fetch, calls that would fetch again are AUTH_KEYS_UNAVAILABLE at once for AUTH_JWKS_COOLDOWN_SECONDS (at least 1 s)", async () => {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const set = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), alg: "RS256", use: "sig", kid: "k1" }] });
  const signed = async (kid: string) => `Bearer ${await new SignJWT({ sub: "alice" }).setProtectedHeader({ alg: "RS256", kid }).setExpirationTime("5m").sign(privateKey)}`;
  const good = await signed("k1");
  const keys = await keyServer();
  try {
    // A token naming a kid the set does not have, once the cooldown after the last good fetch has passed.
    const unknownKid = new JwtAuthenticator({ jwksUrl: keys.url, clockSkewSeconds: 0, jwksCooldownSeconds: 1, jwksMaxAgeSeconds: 60, tokenCacheSeconds: 0 }, memoryLogger().logger);
    keys.answer(200, set);
    assert.is(await reasonFrom(unknownKid, good), "ok");
    keys.answer(500, "down");
    await sleep(1_100);
    const before = keys.fetches();
    const reasons = new Set<string>();
    for (let i = 0; i < 30; i++) reasons.add(await reasonFrom(unknownKid, await signed(`made-up-${i}`)));
    assert.equal([...reasons], ["AUTH_KEYS_UNAVAILABLE"]);
    assert.is(keys.fetches() - before, 1, "one fetch, however many made-up kids");
    assert.is(await reasonFrom(unknownKid, good), "ok", "a known kid of a set still fresh needs no fetch");

    // A set past AUTH_JWKS_MAX_AGE_SECONDS, even with AUTH_JWKS_COOLDOWN_SECONDS=0: every call would fetch it.
    const stale = new JwtAuthenticator({ jwksUrl: keys.url, clockSkewSeconds: 0, jwksCooldownSeconds: 0, jwksMaxAgeSeconds: 1, tokenCacheSeconds: 0 }, memoryLogger().logger);
    keys.answer(200, set);
    assert.is(await reasonFrom(stale, good), "ok");
    keys.answer(500, "down");
    await sleep(1_100);
    const staleBefore = keys.fetches();
    for (let i = 0; i < 30; i++) assert.is(await reasonFrom(stale, good), "AUTH_KEYS_UNAVAILABLE");
    assert.is(keys.fetches() - staleBefore, 1);
    // Once the back-off has passed, the set is fetched again and good tokens verify.
    keys.answer(200, set);
    await sleep(1_100);
    assert.is(await reasonFrom(stale, good), "ok");
    assert.is(keys.fetches() - staleBefore, 2);
  } finally {
    await keys.close();
  }
});

test("each failed key set fetch is logged once, with what the key server did and without the URL's query", async () => {
  const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const rsToken = `Bearer ${b64({ alg: "RS256", kid: "k1" })}.${b64({ sub: "x", exp: Math.floor(Date.now() / 1000) + 600 })}.${"A".repeat(43)}`;
  const cases: Array<[string, (keys: Awaited<ReturnType<typeof keyServer>>) => void, string]> = [
    ["500", (keys) => keys.answer(500, "down"), "answered HTTP 500"],
    ["timeout", (keys) => keys.hang(), "did not answer within 300 ms"],
    ["redirect", (keys) => keys.answer(302, "", { location: "https://idp.example/keys?sig=x" }), "a redirect to https://idp.example/keys?…"],
    ["oversize", (keys) => keys.answer(200, JSON.stringify({ keys: [], padding: "x".repeat(2 << 20) })), "larger than"],
    ["not a key set", (keys) => keys.answer(200, JSON.stringify({ keys: {} })), "not a key set"],
    // A Location that is no URL is the key server's fault too: not the token's (401).
    ["bad redirect", (keys) => keys.answer(302, "", { location: "http://[" }), "a Location that is not a URL"],
  ];
  for (const [name, serve, said] of cases) {
    const keys = await keyServer();
    const { logger, text } = memoryLogger();
    try {
      serve(keys);
      const auth = new JwtAuthenticator(
        { jwksUrl: `${keys.url}?api_key=not-for-logs`, clockSkewSeconds: 0, jwksCooldownSeconds: 30, jwksMaxAgeSeconds: 60, tokenCacheSeconds: 0, jwksTimeoutMs: 300 },
        logger,
      );
      for (let i = 0; i < 10; i++) assert.is(await reasonFrom(auth, rsToken), "AUTH_KEYS_UNAVAILABLE", name);
      const lines = text().split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as { level: number; jwksUrl: string; err: { type: string; message: string } });
      assert.is(lines.length, 1, `${name}: one line for one failed fetch, not one per call`);
      assert.is(lines[0]!.level, 50, name);
      assert.is(lines[0]!.jwksUrl, `${keys.url}?…`, name);
      assert.is(lines[0]!.err.type, "KeySetUnavailable", name);
      assert.match(lines[0]!.err.message, said, name);
      assert.not.match(text(), "not-for-logs", name);
    } finally {
      await keys.close();
    }
  }
});

test("a key set URL's password and query never reach the log, even where the fetch's own error quotes the URL", async () => {
  const keys = await keyServer();
  const { logger, text } = memoryLogger();
  try {
    keys.answer(200, JSON.stringify({ keys: [] }));
    const withCredentials = keys.url.replace("http://", "http://svc:pw-not-for-logs@");
    const auth = new JwtAuthenticator({ jwksUrl: `${withCredentials}?api_key=not-for-logs`, clockSkewSeconds: 0, jwksCooldownSeconds: 30, jwksMaxAgeSeconds: 60, tokenCacheSeconds: 0 }, logger);
    const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const rsToken = `Bearer ${b64({ alg: "RS256", kid: "k1" })}.${b64({ sub: "x", exp: Math.floor(Date.now() / 1000) + 600 })}.${"A".repeat(43)}`;
    assert.is(await reasonFrom(auth, rsToken), "AUTH_KEYS_UNAVAILABLE");
    assert.match(text(), "could not be fetched");
    assert.not.match(text(), "pw-not-for-logs");
    assert.not.match(text(), "not-for-logs");
  } finally {
    await keys.close();
  }
});

test("a key set served with a byte order mark is read, as response.json() reads it", async () => {
  const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
  const set = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), alg: "ES256", use: "sig", kid: "k1" }] });
  await withKeySet(200, `\uFEFF${set}`, async (auth) => {
    const signed = await new SignJWT({ sub: "alice" }).setProtectedHeader({ alg: "ES256", kid: "k1" }).setExpirationTime("5m").sign(privateKey);
    assert.is((await auth.authenticate(`Bearer ${signed}`)).id, "alice");
  });
});

test("a token naming a key jose will not verify with (RSA under 2048 bits) is TOKEN_BAD_SIGNATURE, not AUTH_KEYS_UNAVAILABLE", async () => {
  const legacy = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey.export({ format: "jwk" });
  await withKeySet(200, JSON.stringify({ keys: [{ ...legacy, alg: "RS256", use: "sig", kid: "legacy" }] }), async (auth) => {
    const b64 = (v: object) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const forged = `${b64({ alg: "RS256", kid: "legacy" })}.${b64({ sub: "x", exp: Math.floor(Date.now() / 1000) + 600 })}.${"A".repeat(171)}`;
    assert.is(await reasonFrom(auth, `Bearer ${forged}`), "TOKEN_BAD_SIGNATURE");
  });
});

test("a key set that publishes a private key: its tokens are TOKEN_BAD_SIGNATURE, not a retry for ever, also where the set publishes its public half too, and the log names the key; the set's other keys still verify", async () => {
  const leaked = await generateKeyPair("RS256", { extractable: true });
  const good = await generateKeyPair("RS256", { extractable: true });
  const nullD = await generateKeyPair("RS256", { extractable: true });
  const keys = [
    { ...(await exportJWK(leaked.privateKey)), alg: "RS256", use: "sig", kid: "leaked" },
    // Its public half, under its own kid and under another.
    { ...(await exportJWK(leaked.publicKey)), alg: "RS256", use: "sig", kid: "leaked" },
    { ...(await exportJWK(leaked.publicKey)), alg: "RS256", use: "sig", kid: "leaked-public" },
    { ...(await exportJWK(good.publicKey)), alg: "RS256", use: "sig", kid: "good" },
    // A public key whose serializer writes "d": null: no private key.
    { ...(await exportJWK(nullD.publicKey)), alg: "RS256", use: "sig", kid: "null-d", d: null },
  ];
  const signed = (key: Parameters<SignJWT["sign"]>[0], kid: string | undefined) =>
    new SignJWT({})
      .setProtectedHeader(kid === undefined ? { alg: "RS256" } : { alg: "RS256", kid })
      .setSubject("alice")
      .setExpirationTime(Math.floor(Date.now() / 1000) + 600)
      .sign(key);
  await withKeySet(200, JSON.stringify({ keys }), async (auth, log) => {
    for (const kid of ["leaked", "leaked-public", undefined]) {
      assert.is(await reasonFrom(auth, `Bearer ${await signed(leaked.privateKey, kid)}`), "TOKEN_BAD_SIGNATURE", `kid ${kid}`);
    }
    assert.match(log(), /publish a private key \(kid leaked\)/);
    assert.not.match(log(), "null-d", "a null d is no private key");
    assert.is((await auth.authenticate(`Bearer ${await signed(nullD.privateKey, "null-d")}`)).id, "alice", "and its key verifies");
    assert.is((await auth.authenticate(`Bearer ${await signed(good.privateKey, "good")}`)).id, "alice");
  });
});

test.run();

import { generateKeyPair, exportJWK, SignJWT, type JWK } from "jose";
import http from "node:http";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type Backend, connectTestDatabase } from "../support/env.js";
import { memoryLogger, newEntityId, push, startService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, testAuth, token } from "../support/tokens.js";

/** Authentication details, the first push's claim, and access management. */
export function authSuite(backend: Backend) {
  const s = serviceSuite("auth: tokens, the first push's claim, managing access", backend, { AUTH_MAX_TOKEN_LIFETIME: String(25 * 3600) });

  s("token problems are 401 with a code naming the cause", async ({ svc }) => {
    const cases: Array<[Record<string, string>, string]> = [
      [{}, "AUTH_REQUIRED"],
      [{ authorization: "Basic dXNlcjpwYXNz" }, "TOKEN_MALFORMED"],
      [{ authorization: "Bearer not-a-jwt" }, "TOKEN_MALFORMED"],
      [bearer(await token({ notBeforeIn: 3600 })), "TOKEN_NOT_YET_VALID"],
      [bearer(await token({ issuedAtIn: 3600, expiresIn: 7200 })), "TOKEN_NOT_YET_VALID"],
      [bearer(await token({ expiresIn: 48 * 3600 })), "TOKEN_LIFETIME_TOO_LONG"],
      [bearer(await token({ issuer: "https://elsewhere.test" })), "TOKEN_WRONG_ISSUER"],
      [bearer(await token({ expiresIn: -3600 })), "TOKEN_EXPIRED"],
      [bearer(await token({ sub: "has space" })), "TOKEN_CLAIMS_INVALID"],
    ];
    for (const [headers, code] of cases) {
      const r = await svc.restAs(headers).get(`/api/entities/${newEntityId()}/active-version`);
      assert.is(r.status, 401, code);
      assert.is(r.body.code, code);
      // RFC 6750 (3): a token sent and refused is invalid_token, and why; none sent, just the scheme.
      const challenge = r.headers.get("www-authenticate") ?? "";
      if (code === "AUTH_REQUIRED") assert.is(challenge, 'Bearer realm="entity-versions"');
      else assert.match(challenge, /^Bearer realm="entity-versions", error="invalid_token", error_description="[\x20\x21\x23-\x5b\x5d-\x7e]+"$/, code);
    }
    // What is wrong with the header is said, since the fix differs.
    const bare = await svc.restAs({ authorization: await token({}) }).get(`/api/entities/x/active-version`);
    assert.is(bare.body.code, "TOKEN_MALFORMED");
    assert.match(bare.body.error, /has no scheme: send Authorization: Bearer <jwt>/);
    for (const empty of ["Bearer", "Bearer ", "bearer   "]) {
      const r = await svc.restAs({ authorization: empty }).get(`/api/entities/x/active-version`);
      assert.equal([r.status, r.body.code], [401, "TOKEN_MALFORMED"], JSON.stringify(empty));
      assert.match(r.body.error, /says Bearer but carries no token \(is the variable holding it set\?\): send Authorization: Bearer <jwt>/);
    }
    const basic = await svc.restAs({ authorization: "Basic dXNlcjpwYXNz" }).get(`/api/entities/x/active-version`);
    assert.match(basic.body.error, /uses the Basic scheme/);
    // A token sent without its scheme, something after it: never quoted back, as a scheme would be.
    const jwt = await token({});
    const headless = await svc.restAs({ authorization: `${jwt} x` }).get(`/api/entities/x/active-version`);
    assert.equal([headless.status, headless.body.code], [401, "TOKEN_MALFORMED"]);
    assert.match(headless.body.error, "the token itself, sent without `Bearer `?");
    assert.not.match(JSON.stringify(headless.body) + (headless.headers.get("www-authenticate") ?? ""), jwt.split(".")[1]!);
    const notJwt = await svc.restAs({ authorization: "Bearer not-a-jwt" }).get(`/api/entities/x/active-version`);
    assert.match(notJwt.body.error, /is not a JWT/);
    const rolesNotList = await new SignJWT({ roles: "admin" })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("x")
      .setIssuer(testAuth.issuer)
      .setAudience(testAuth.audience)
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode(testAuth.secret));
    assert.is((await svc.restAs(bearer(rolesNotList)).get(`/api/entities/x/active-version`)).body.code, "TOKEN_CLAIMS_INVALID");
    const noExp = await new SignJWT({}).setProtectedHeader({ alg: "HS256" }).setSubject("x").setIssuer(testAuth.issuer).setAudience(testAuth.audience).sign(new TextEncoder().encode(testAuth.secret));
    assert.is((await svc.restAs(bearer(noExp)).get(`/api/entities/x/active-version`)).body.code, "TOKEN_CLAIMS_INVALID");
    // Two Authorization headers: Node would keep the first unseen, a proxy may have judged by the other.
    const good = bearer(await token({})).authorization;
    for (const [path, method, headers] of [
      [`/api/entities/${newEntityId()}/active-version`, "GET", {}],
      ["/entityversions.v1.EntityVersionsService/GetActiveVersion", "POST", { "content-type": "application/json", "connect-protocol-version": "1" }],
    ] as const) {
      const twice = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request(`${svc.url}${path}`, { method, headers }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on("error", reject);
        req.setHeader("authorization", [good, "Bearer x.y.z"]);
        req.end(method === "POST" ? JSON.stringify({ entityId: newEntityId() }) : undefined);
      });
      assert.is(twice.status, 401, path);
      assert.match(twice.body, "The request carries 2 Authorization headers: send Authorization: Bearer <jwt>", path);
    }
    const skewed = await token({ expiresIn: -10 });
    assert.is((await svc.restAs(bearer(skewed)).get(`/api/entities/${newEntityId()}/active-version`)).body.code, "ENTITY_NOT_FOUND", "within the clock skew");
  });

  s("the first pusher with the publisher role claims the entity; readers without the role cannot", async ({ svc }) => {
    const e = newEntityId();
    const reader = svc.restAs(bearer(await token({ sub: "reader", roles: [] })));
    const noRole = await reader.post(`/api/entities/${e}/versions/upload-url`, { version: "2026.01.01-000000", source_hash: "a".repeat(64) });
    assert.is(noRole.status, 404);
    assert.is(noRole.body.code, "ENTITY_NOT_FOUND");
    assert.match(noRole.body.error, "An entity is created by its first confirmed push, which needs the publisher role: your token does not carry it.");
    const first = await push(svc, e);
    assert.is(first.confirm!.status, 201);
    const access = await svc.rest.get(`/api/entities/${e}/access`);
    assert.equal(access.body, { entity_id: e, publishers: ["tester"], shares: [], org_stores: [], public_store: false });
    const other = svc.restAs(bearer(await token({ sub: "latecomer", roles: ["publisher"] })));
    const read = await other.get(`/api/entities/${e}/versions`);
    assert.is(read.body.code, "ENTITY_NOT_FOUND");
    assert.match(read.body.error, "does not exist, or you have no access to it", "a read learns nothing");
    // A publisher's push would have claimed a free id: it is told the id is taken, and what to do.
    const taken = await other.post(`/api/entities/${e}/versions/upload-url`, { version: "2026.01.01-000000", source_hash: "a".repeat(64) });
    assert.equal([taken.status, taken.body.code], [404, "ENTITY_NOT_FOUND"]);
    assert.match(taken.body.error, `Entity id "${e}" is taken`);
    assert.match(taken.body.error, "ask one of its publishers to add you");
    // A caller without the role learns nothing from a push either.
    const hidden = await reader.post(`/api/entities/${e}/versions/upload-url`, { version: "2026.01.01-000000", source_hash: "a".repeat(64) });
    assert.equal([hidden.status, hidden.body.code], [404, "ENTITY_NOT_FOUND"]);
    assert.match(hidden.body.error, "does not exist, or you have no access to it");
    assert.is(hidden.body.error, noRole.body.error, "the same answer as for a free id: the role is the caller's own to know about");
  });

  s("an admin's first push makes it the first publisher: the entity is never left for a stranger to claim", async ({ svc }) => {
    const e = newEntityId();
    const admin = svc.restAs(bearer(await token({ sub: "root", roles: ["admin"] })));
    const v1 = (await push({ rest: admin }, e, { setAsActive: true })).confirm!.body.version;
    assert.equal((await admin.get(`/api/entities/${e}/access`)).body.publishers, ["root"]);
    const mallory = svc.restAs(bearer(await token({ sub: "mallory", roles: ["publisher"] })));
    // No base: a claim would have been told STALE_BASE with the tip; a taken id says nothing of it.
    const noBase = await mallory.post(`/api/entities/${e}/versions/upload-url`, { version: "2026.01.01-000000", source_hash: "a".repeat(64) });
    assert.equal([noBase.status, noBase.body.code, noBase.body.latest_version], [404, "ENTITY_NOT_FOUND", undefined], JSON.stringify(noBase.body));
    const onTip = await push({ rest: mallory }, e, { base: v1.id, setAsActive: true });
    assert.equal([onTip.res.status, onTip.res.body.code], [404, "ENTITY_NOT_FOUND"]);
    assert.is((await admin.get(`/api/entities/${e}/active-version`)).body.id, v1.id);
    assert.equal((await admin.get(`/api/entities/${e}/access`)).body.publishers, ["root"]);
  });

  s("racing first pushes by two publishers: exactly one claims the entity", async ({ svc }) => {
    const e = newEntityId();
    const alice = svc.restAs(bearer(await token({ sub: "alice", roles: ["publisher"] })));
    const bob = svc.restAs(bearer(await token({ sub: "bob", roles: ["publisher"] })));
    const who = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? alice : bob));
    const prepared = await Promise.all(who.map((client) => uploadOnly({ rest: client }, e)));
    const results = await Promise.all(
      prepared.map((p, i) =>
        who[i]!.post(`/api/entities/${e}/versions/confirm`, {
          storage_path: p.res.body.storage_path,
          version: p.version,
          source_hash: p.sourceHash,
          file_size_bytes: Buffer.byteLength(p.content),
        }),
      ),
    );
    const created = results.filter((r) => r.status === 201);
    assert.is(created.length, 1, JSON.stringify(results.map((r) => [r.status, r.body.code])));
    const winner = created[0]!.body.version.published_by as string;
    for (const [i, r] of results.entries()) {
      if (r.status === 201) continue;
      const sameUser = (who[i] === alice ? "alice" : "bob") === winner;
      assert.is(r.body.code, sameUser ? "STALE_BASE" : "ENTITY_NOT_FOUND", `${i}: ${JSON.stringify(r.body)}`);
    }
    const access = await svc.restAs(bearer(await token({ sub: "root", roles: ["admin"] }))).get(`/api/entities/${e}/access`);
    assert.equal(access.body.publishers, [winner]);
  });

  if (backend === "mysql") {
    s("a publisher removed while their change waits for the entity's lock is refused under it", async ({ svc }) => {
      const e = newEntityId();
      const v1 = (await push(svc, e, { setAsActive: true })).confirm!.body.version;
      const v2 = (await push(svc, e, { base: v1.id })).confirm!.body.version;
      assert.equal((await svc.rest.post(`/api/entities/${e}/publishers`, { user_id: "bob" })).body.publishers, ["bob", "tester"]);
      const bob = svc.restAs(bearer(await token({ sub: "bob", roles: ["publisher"] })));
      const db = connectTestDatabase(backend, svc.db);
      // Bob's removal, committed while his calls wait for the lock it holds:
      // each of them decided from a read made before it committed.
      const removal = await db.transaction();
      try {
        await removal("entities").where("id", e).forUpdate().first("id");
        await removal("entity_publishers").where({ entity_id: e, user_id: "bob" }).delete();
        const calls = [
          bob.delete(`/api/entities/${e}/versions/${v2.id}`),
          bob.put(`/api/entities/${e}/active-version`, { version_id: v2.id }),
          bob.post(`/api/entities/${e}/shares`, { user_id: "mallory" }),
          bob.delete(`/api/entities/${e}/publishers/tester`),
        ];
        // Each waits in its `select … for update` of the entity row.
        const waiting = async () =>
          ((await db.raw("show full processlist")) as [Array<{ Info: string | null }>])[0].filter((p) => p.Info?.includes(`'${e}'`) === true && p.Info.endsWith("for update")).length;
        for (const started = Date.now(); (await waiting()) < calls.length; await new Promise((resolve) => setTimeout(resolve, 20))) {
          if (Date.now() - started > 10_000) throw new Error(`only ${await waiting()} of Bob's calls reached the lock`);
        }
        await removal.commit();
        for (const r of await Promise.all(calls)) assert.equal([r.status, r.body.code], [404, "ENTITY_NOT_FOUND"]);
      } finally {
        if (!removal.isCompleted()) await removal.rollback();
        await db.destroy();
      }
      assert.is((await svc.rest.get(`/api/entities/${e}/versions/${v2.id}`)).status, 200, "v2 is not deleted");
      assert.is((await svc.rest.get(`/api/entities/${e}/active-version`)).body.id, v1.id);
      const access = (await svc.rest.get(`/api/entities/${e}/access`)).body;
      assert.equal([access.publishers, access.shares], [["tester"], []]);
      const events = (await svc.rest.get(`/api/entities/${e}/events`)).body.events as Array<{ actor: string }>;
      assert.ok(events.every((ev) => ev.actor !== "bob"), "Bob changed nothing");
    });
  }

  s("managing access: no-ops, the last publisher, nothing created for an entity that does not exist", async ({ svc }) => {
    const e = newEntityId();
    const admin = svc.restAs(bearer(await token({ sub: "root", roles: ["admin"] })));
    // An entity comes into being with its first push, not with an access change.
    for (const change of [
      () => admin.post(`/api/entities/${e}/publishers`, { user_id: "carol" }),
      () => admin.post(`/api/entities/${e}/shares`, { user_id: "carol" }),
      () => admin.put(`/api/entities/${e}/stores/public`, undefined),
      () => admin.put(`/api/entities/${e}/stores/orgs/acme`, undefined),
    ]) {
      const r = await change();
      assert.is(r.status, 404);
      assert.is(r.body.code, "ENTITY_NOT_FOUND");
    }
    assert.is((await admin.get(`/api/entities/${e}/access`)).body.code, "ENTITY_NOT_FOUND", "no entity row was created");
    const carol = svc.restAs(bearer(await token({ sub: "carol", roles: ["publisher"] })));
    assert.is((await push({ rest: carol }, e)).confirm!.status, 201);
    assert.equal((await admin.get(`/api/entities/${e}/access`)).body.publishers, ["carol"]);
    // The entity is claimed: tester (a publisher, but not of it) cannot push.
    assert.is((await push(svc, e)).res.body.code, "ENTITY_NOT_FOUND");
    assert.equal((await carol.post(`/api/entities/${e}/publishers`, { userId: "carol" })).body.publishers, ["carol"]);
    assert.equal((await carol.delete(`/api/entities/${e}/shares/nobody`)).body.shares, []);
    const last = await carol.delete(`/api/entities/${e}/publishers/carol`);
    assert.is(last.status, 400);
    assert.is(last.body.code, "LAST_PUBLISHER");
    assert.equal((await carol.post(`/api/entities/${e}/publishers`, { user_id: "dave" })).body.publishers, ["carol", "dave"]);
    assert.equal((await carol.delete(`/api/entities/${e}/publishers/carol`)).body.publishers, ["dave"]);
    assert.is((await carol.get(`/api/entities/${e}/versions`)).body.code, "ENTITY_NOT_FOUND");
    const bad = await admin.post(`/api/entities/${e}/shares`, { user_id: "has space" });
    assert.is(bad.status, 400);
    assert.match(bad.body.error, "user_id");
    // Dot segments: a client or proxy would resolve them away in the path that removes the id.
    for (const dots of [".", ".."]) {
      const refused = await admin.post(`/api/entities/${e}/shares`, { user_id: dots });
      assert.equal([refused.status, refused.body.code], [400, "INVALID_ARGUMENT"], dots);
      assert.match(refused.body.error, "not . or ..");
    }
    // Bytes that are not UTF-8: refused, not stored as another id (U+FFFD in their place).
    const notUtf8 = await fetch(`${svc.url}/api/entities/${e}/shares`, {
      method: "POST",
      headers: { ...admin.defaultHeaders, "content-type": "application/json" },
      body: Buffer.concat([Buffer.from('{"user_id":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('x"}')]),
    });
    assert.is(notUtf8.status, 400);
    assert.match(((await notUtf8.json()) as { error: string }).error, "the body is not UTF-8");
    const both = await admin.put(`/api/entities/${e}/stores/orgs/acme`, undefined);
    assert.equal(both.body.org_stores, ["acme"]);
    assert.is((await admin.put(`/api/entities/${e}/stores/public`, undefined)).body.public_store, true);
    assert.is((await admin.delete(`/api/entities/${e}/stores/public`)).body.public_store, false);
  });

  return s;
}

type Key = Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];

/** JWKS keys and rotation, and tokens kept out of the logs. */
export function authKeysSuite(backend: Backend) {
  const s = suite(`${backend}: auth: JWKS rotation, no tokens in logs`);

  s("each access list holds at most MAX_ACCESS_ENTRIES; past it, ACCESS_LIST_FULL and nothing changes", async () => {
    const svc = await startService(backend, { env: { MAX_ACCESS_ENTRIES: "2" } });
    try {
      const e = newEntityId();
      await push(svc, e);
      const admin = svc.restAs(bearer(await token({ sub: "root", roles: ["admin"] })));
      // The pusher is the first publisher: one more fits.
      assert.is((await admin.post(`/api/entities/${e}/publishers`, { user_id: "p2" })).status, 200);
      const publishers = await admin.post(`/api/entities/${e}/publishers`, { user_id: "p3" });
      assert.equal([publishers.status, publishers.body.code], [400, "ACCESS_LIST_FULL"]);
      assert.match(publishers.body.error, /already has 2 publishers, as many as allowed: remove one first/);
      for (const user of ["s1", "s2"]) assert.is((await admin.post(`/api/entities/${e}/shares`, { user_id: user })).status, 200);
      assert.is((await admin.post(`/api/entities/${e}/shares`, { user_id: "s3" })).body.code, "ACCESS_LIST_FULL");
      assert.is((await admin.post(`/api/entities/${e}/shares`, { user_id: "s1" })).status, 200, "adding what is there changes nothing, and is not refused");
      for (const org of ["o1", "o2"]) assert.is((await admin.put(`/api/entities/${e}/stores/orgs/${org}`, undefined)).status, 200);
      const orgs = await svc.grpc.call("PublishToOrgStore", { entity_id: e, org_id: "o3" }, bearer(await token({ sub: "root", roles: ["admin"] })));
      assert.ok(!orgs.ok && orgs.error.reason === "ACCESS_LIST_FULL", JSON.stringify(orgs));
      const access = (await admin.get(`/api/entities/${e}/access`)).body;
      assert.equal([access.publishers.length, access.shares, access.org_stores], [2, ["s1", "s2"], ["o1", "o2"]]);
      // Removing one makes room again.
      assert.is((await admin.delete(`/api/entities/${e}/shares/s2`)).status, 200);
      assert.is((await admin.post(`/api/entities/${e}/shares`, { user_id: "s3" })).status, 200);
    } finally {
      await svc.close();
    }
  });

  s("RS256/ES256 keys from a JWKS URL, refetched when a token names an unknown kid", async () => {
    const k1 = await generateKeyPair("ES256");
    const k2 = await generateKeyPair("RS256");
    const jwk = async (key: Key, kid: string, alg: string): Promise<JWK> => ({ ...(await exportJWK(key)), kid, alg, use: "sig" });
    let keys: JWK[] = [await jwk(k1.publicKey, "k1", "ES256")];
    let fetches = 0;
    const jwks = http.createServer((_req, res) => {
      fetches++;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ keys }));
    });
    await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(jwks.address() as { port: number }).port}/.well-known/jwks.json`;
    const svc = await startService(backend, { env: { AUTH_JWT_SECRET: "", AUTH_JWKS_URL: url, AUTH_JWKS_COOLDOWN_SECONDS: "0", AUTH_TOKEN_CACHE_SECONDS: "0" } });
    const signed = (key: Key, kid: string, alg: string, sub = "keyed") =>
      new SignJWT({ roles: ["publisher"] })
        .setProtectedHeader({ alg, kid })
        .setSubject(sub)
        .setIssuer(testAuth.issuer)
        .setAudience(testAuth.audience)
        .setExpirationTime("1h")
        .sign(key);
    try {
      const e = newEntityId();
      const asK1 = svc.restAs(bearer(await signed(k1.privateKey, "k1", "ES256")));
      assert.is((await push({ rest: asK1 }, e)).confirm!.status, 201);
      assert.is(fetches, 1);
      keys = [await jwk(k2.publicKey, "k2", "RS256")];
      const asK2 = svc.restAs(bearer(await signed(k2.privateKey, "k2", "RS256")));
      assert.is((await asK2.get(`/api/entities/${e}/versions`)).status, 200, "a rotated key is fetched on its first use");
      assert.is(fetches, 2);
      const stale = await asK1.get(`/api/entities/${e}/versions`);
      assert.is(stale.status, 401, "the retired key no longer verifies");
      assert.is(stale.body.code, "TOKEN_BAD_SIGNATURE");
      const hs = await svc.restAs(bearer(await token())).get(`/api/entities/${e}/versions`);
      assert.is(hs.body.code, "TOKEN_MALFORMED", "HS256 is not accepted without AUTH_JWT_SECRET");
      const forged = await signed((await generateKeyPair("ES256")).privateKey, "k2", "ES256");
      assert.is((await svc.restAs(bearer(forged)).get(`/api/entities/${e}/versions`)).body.code, "TOKEN_BAD_SIGNATURE");
    } finally {
      await svc.close();
      jwks.close();
    }
  });

  s("a key withdrawn from the JWKS stops verifying once AUTH_JWKS_MAX_AGE_SECONDS have passed, without any unknown kid", async () => {
    const k1 = await generateKeyPair("ES256");
    const k2 = await generateKeyPair("ES256");
    const jwk = async (key: Key, kid: string): Promise<JWK> => ({ ...(await exportJWK(key)), kid, alg: "ES256", use: "sig" });
    let keys: JWK[] = [await jwk(k1.publicKey, "k1"), await jwk(k2.publicKey, "k2")];
    const jwks = http.createServer((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ keys }));
    });
    await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(jwks.address() as { port: number }).port}/jwks.json`;
    const svc = await startService(backend, {
      env: { AUTH_JWT_SECRET: "", AUTH_JWKS_URL: url, AUTH_JWKS_COOLDOWN_SECONDS: "0", AUTH_JWKS_MAX_AGE_SECONDS: "1", AUTH_TOKEN_CACHE_SECONDS: "0" },
    });
    const signed = (key: Key, kid: string) =>
      new SignJWT({ roles: ["publisher"] }).setProtectedHeader({ alg: "ES256", kid }).setSubject("keyed").setIssuer(testAuth.issuer).setAudience(testAuth.audience).setExpirationTime("1h").sign(key);
    try {
      const e = newEntityId();
      assert.is((await push({ rest: svc.restAs(bearer(await signed(k1.privateKey, "k1"))) }, e)).confirm!.status, 201);
      keys = [await jwk(k2.publicKey, "k2")];
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      // A token signed after the withdrawal, with the withdrawn key, naming a kid the cached set still had.
      const late = await svc.restAs(bearer(await signed(k1.privateKey, "k1"))).get(`/api/entities/${e}/versions`);
      assert.equal([late.status, late.body.code], [401, "TOKEN_BAD_SIGNATURE"]);
      assert.is((await svc.restAs(bearer(await signed(k2.privateKey, "k2"))).get(`/api/entities/${e}/versions`)).status, 200);
    } finally {
      await svc.close();
      jwks.close();
    }
  });

  s("no log line carries a token, valid or not", async () => {
    const { logger, text } = memoryLogger("trace");
    const svc = await startService(backend, { logger });
    try {
      const good = await token({ sub: "logged", roles: ["publisher"] });
      const bad = await token({ sub: "logged", secret: "wrong-secret-wrong-secret-wrong-secret" });
      const e = newEntityId();
      await push({ rest: svc.restAs(bearer(good)) }, e);
      await svc.restAs(bearer(bad)).get(`/api/entities/${e}/versions`);
      await svc.grpcAs(bearer(good)).call("ListVersions", { entity_id: e });
      await svc.grpcAs(bearer(bad)).call("ListVersions", { entity_id: e });
      const logs = text();
      assert.ok(logs.includes('"rpc"'), "the requests were logged");
      for (const t of [good, bad]) {
        for (const part of t.split(".")) assert.not.ok(logs.includes(part), "a token part appears in the logs");
      }
    } finally {
      await svc.close();
    }
  });

  return s;
}

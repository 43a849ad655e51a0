import * as assert from "uvu/assert";
import type { Backend } from "../support/env.js";
import { grpc } from "../support/grpc-client.js";
import { newEntityId, newSourceHash, nextVersionString, push, type TestService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, token } from "../support/tokens.js";

type Kind = "read" | "write";
type Outcome = "ok" | "not-found" | "denied" | "unauthenticated";

/** The entities of the matrix and an admin to set them up. */
interface World {
  svc: TestService;
  admin: Record<string, string>;
  /** Private: publisher "owner", shared with "sharee", in org "acme"'s store. */
  priv: string;
  /** Public store: publisher "owner2". */
  pub: string;
}

/** One RPC of the matrix: how to prepare a call that succeeds when allowed, and undo it. */
interface RpcCase {
  rpc: string;
  kind: Kind;
  okStatus?: number;
  prepare(w: World, entity: string): Promise<{ rest: [string, string, unknown?]; grpc: object; cleanup?: () => Promise<void> }>;
}

async function tip(w: World, entity: string): Promise<string> {
  return (await w.svc.restAs(w.admin).get(`/api/entities/${entity}/versions?page_size=1`)).body.versions[0].id;
}

const v = (e: string) => `/api/entities/${e}`;

const rpcs: RpcCase[] = [
  {
    rpc: "GetUploadUrl",
    kind: "write",
    async prepare(w, e) {
      const body = { version: nextVersionString(), source_hash: newSourceHash(), base_version_id: await tip(w, e) };
      return { rest: ["POST", `${v(e)}/versions/upload-url`, body], grpc: { entity_id: e, ...body } };
    },
  },
  {
    rpc: "ConfirmUpload",
    kind: "write",
    okStatus: 201,
    async prepare(w, e) {
      const base = await tip(w, e);
      const up = await uploadOnly({ rest: w.svc.restAs(w.admin) }, e, { base });
      const body = { storage_path: up.res.body.storage_path, version: up.version, source_hash: up.sourceHash, file_size_bytes: Buffer.byteLength(up.content), base_version_id: base };
      return { rest: ["POST", `${v(e)}/versions/confirm`, body], grpc: { entity_id: e, ...body } };
    },
  },
  {
    rpc: "GetDownloadUrl",
    kind: "read",
    async prepare(w, e) {
      const id = await tip(w, e);
      return { rest: ["GET", `${v(e)}/versions/${id}/download`], grpc: { entity_id: e, version_id: id } };
    },
  },
  { rpc: "GetActiveVersion", kind: "read", prepare: async (_w, e) => ({ rest: ["GET", `${v(e)}/active-version`], grpc: { entity_id: e } }) },
  {
    rpc: "SetActiveVersion",
    kind: "write",
    async prepare(w, e) {
      const active = (await w.svc.restAs(w.admin).get(`${v(e)}/active-version`)).body.id;
      return { rest: ["PUT", `${v(e)}/active-version`, { versionId: active }], grpc: { entity_id: e, version_id: active } };
    },
  },
  {
    rpc: "DeleteVersion",
    kind: "write",
    async prepare(w, e) {
      const fresh = (await push({ rest: w.svc.restAs(w.admin) }, e, { base: await tip(w, e) })).confirm!.body.version.id;
      return { rest: ["DELETE", `${v(e)}/versions/${fresh}`], grpc: { entity_id: e, version_id: fresh } };
    },
  },
  { rpc: "ListVersions", kind: "read", prepare: async (_w, e) => ({ rest: ["GET", `${v(e)}/versions?page_size=2`], grpc: { entity_id: e, page_size: 2 } }) },
  { rpc: "ListEvents", kind: "read", prepare: async (_w, e) => ({ rest: ["GET", `${v(e)}/events?page_size=2`], grpc: { entity_id: e, page_size: 2 } }) },
  {
    rpc: "GetVersion",
    kind: "read",
    async prepare(w, e) {
      const id = await tip(w, e);
      return { rest: ["GET", `${v(e)}/versions/${id}`], grpc: { entity_id: e, version_id: id } };
    },
  },
  { rpc: "GetEntityAccess", kind: "write", prepare: async (_w, e) => ({ rest: ["GET", `${v(e)}/access`], grpc: { entity_id: e } }) },
  {
    rpc: "AddPublisher",
    kind: "write",
    prepare: async (w, e) => ({
      rest: ["POST", `${v(e)}/publishers`, { user_id: "extra-publisher" }],
      grpc: { entity_id: e, user_id: "extra-publisher" },
      cleanup: async () => void (await w.svc.restAs(w.admin).delete(`${v(e)}/publishers/extra-publisher`)),
    }),
  },
  { rpc: "RemovePublisher", kind: "write", prepare: async (_w, e) => ({ rest: ["DELETE", `${v(e)}/publishers/nobody`], grpc: { entity_id: e, user_id: "nobody" } }) },
  {
    rpc: "AddShare",
    kind: "write",
    prepare: async (w, e) => ({
      rest: ["POST", `${v(e)}/shares`, { user_id: "extra-sharee" }],
      grpc: { entity_id: e, user_id: "extra-sharee" },
      cleanup: async () => void (await w.svc.restAs(w.admin).delete(`${v(e)}/shares/extra-sharee`)),
    }),
  },
  { rpc: "RemoveShare", kind: "write", prepare: async (_w, e) => ({ rest: ["DELETE", `${v(e)}/shares/nobody`], grpc: { entity_id: e, user_id: "nobody" } }) },
  {
    rpc: "PublishToOrgStore",
    kind: "write",
    prepare: async (w, e) => ({
      rest: ["PUT", `${v(e)}/stores/orgs/extra-org`],
      grpc: { entity_id: e, org_id: "extra-org" },
      cleanup: async () => void (await w.svc.restAs(w.admin).delete(`${v(e)}/stores/orgs/extra-org`)),
    }),
  },
  { rpc: "UnpublishFromOrgStore", kind: "write", prepare: async (_w, e) => ({ rest: ["DELETE", `${v(e)}/stores/orgs/nobody-org`], grpc: { entity_id: e, org_id: "nobody-org" } }) },
  {
    rpc: "PublishToPublicStore",
    kind: "write",
    prepare: async (w, e) => ({
      rest: ["PUT", `${v(e)}/stores/public`],
      grpc: { entity_id: e },
      cleanup: async () => void (e === w.priv ? await w.svc.restAs(w.admin).delete(`${v(e)}/stores/public`) : undefined),
    }),
  },
  {
    rpc: "UnpublishFromPublicStore",
    kind: "write",
    prepare: async (w, e) => ({
      rest: ["DELETE", `${v(e)}/stores/public`],
      grpc: { entity_id: e },
      cleanup: async () => void (e === w.pub ? await w.svc.restAs(w.admin).put(`${v(e)}/stores/public`, undefined) : undefined),
    }),
  },
];

/** A kind of caller, its credentials, the entity it calls, and what it may do there. */
interface CallerCase {
  name: string;
  headers: () => Promise<Record<string, string>>;
  entity: (w: World) => string;
  expect: Record<Kind, Outcome>;
  /** The REST code of an unauthenticated caller. */
  code?: string;
}

const ok = { read: "ok", write: "ok" } as const;
const readOnly = { read: "ok", write: "denied" } as const;
const hidden = { read: "not-found", write: "not-found" } as const;
const unauth = { read: "unauthenticated", write: "unauthenticated" } as const;

/** Organizations none of the matrix's entities is in. */
const manyOrgs = (n: number) => Array.from({ length: n }, (_, i) => `other-org-${i}`);

const callers: CallerCase[] = [
  { name: "anonymous", headers: async () => ({}), entity: (w) => w.priv, expect: unauth, code: "AUTH_REQUIRED" },
  { name: "bad signature", headers: async () => bearer(await token({ sub: "owner", secret: "some-other-secret-0123456789abcdefgh" })), entity: (w) => w.priv, expect: unauth, code: "TOKEN_BAD_SIGNATURE" },
  { name: "expired", headers: async () => bearer(await token({ sub: "owner", expiresIn: -3600 })), entity: (w) => w.priv, expect: unauth, code: "TOKEN_EXPIRED" },
  { name: "wrong audience", headers: async () => bearer(await token({ sub: "owner", audience: "someone-else" })), entity: (w) => w.priv, expect: unauth, code: "TOKEN_WRONG_AUDIENCE" },
  { name: "publisher role, no access to this entity", headers: async () => bearer(await token({ sub: "stranger", roles: ["publisher"] })), entity: (w) => w.priv, expect: hidden },
  { name: "publisher of the entity", headers: async () => bearer(await token({ sub: "owner", roles: ["publisher"] })), entity: (w) => w.priv, expect: ok },
  { name: "shared user", headers: async () => bearer(await token({ sub: "sharee", roles: [] })), entity: (w) => w.priv, expect: readOnly },
  { name: "org member, entity in the org's store", headers: async () => bearer(await token({ sub: "member", roles: ["publisher"], orgs: ["beta", "acme"] })), entity: (w) => w.priv, expect: readOnly },
  // Up to eight organizations are joined one by one, beyond that read with one IN list: both shapes, at the edge.
  { name: "org member of eight orgs, the entity's last", headers: async () => bearer(await token({ sub: "member8", roles: ["publisher"], orgs: [...manyOrgs(7), "acme"] })), entity: (w) => w.priv, expect: readOnly },
  { name: "org member of twelve orgs, the entity's last", headers: async () => bearer(await token({ sub: "member12", roles: ["publisher"], orgs: [...manyOrgs(11), "acme"] })), entity: (w) => w.priv, expect: readOnly },
  { name: "org member of twelve other orgs", headers: async () => bearer(await token({ sub: "outsider12", roles: ["publisher"], orgs: manyOrgs(12) })), entity: (w) => w.priv, expect: hidden },
  { name: "org member of another org", headers: async () => bearer(await token({ sub: "outsider", roles: ["publisher"], orgs: ["beta"] })), entity: (w) => w.priv, expect: hidden },
  { name: "any user, entity in the public store", headers: async () => bearer(await token({ sub: "passer-by", roles: [] })), entity: (w) => w.pub, expect: readOnly },
  { name: "admin", headers: async () => bearer(await token({ sub: "root", roles: ["admin"] })), entity: (w) => w.priv, expect: ok },
];

const grpcCode: Record<Outcome, number> = {
  ok: grpc.status.OK,
  "not-found": grpc.status.NOT_FOUND,
  denied: grpc.status.PERMISSION_DENIED,
  unauthenticated: grpc.status.UNAUTHENTICATED,
};
const httpStatus: Record<Exclude<Outcome, "ok">, number> = { "not-found": 404, denied: 403, unauthenticated: 401 };
const restCode = (outcome: Outcome, caller: CallerCase) =>
  outcome === "not-found" ? "ENTITY_NOT_FOUND" : outcome === "denied" ? "PERMISSION_DENIED" : caller.code!;

/** Spec 5 on every unary RPC of the services, for every kind of caller, over REST and gRPC (WatchEvents: test/contract/watch.ts). */
export function authMatrixSuite(backend: Backend) {
  const s = serviceSuite("access matrix: every RPC × every kind of caller, REST and gRPC", backend);
  const world = {} as World;

  s.before(async (ctx) => {
    try {
      const adminHeaders = bearer(await token({ sub: "root", roles: ["admin"] }));
      const admin = ctx.svc.restAs(adminHeaders);
      const owner = ctx.svc.restAs(bearer(await token({ sub: "owner", roles: ["publisher"] })));
      const owner2 = ctx.svc.restAs(bearer(await token({ sub: "owner2", roles: ["publisher"] })));
      Object.assign(world, { svc: ctx.svc, admin: adminHeaders, priv: newEntityId("priv"), pub: newEntityId("pub") });
      for (const [client, e] of [[owner, world.priv], [owner2, world.pub]] as const) {
        const first = await push({ rest: client }, e, { setAsActive: true });
        assert.is(first.confirm?.status, 201, JSON.stringify(first.confirm?.body));
        await push({ rest: client }, e, { base: first.confirm!.body.version.id });
      }
      assert.is((await admin.post(`${v(world.priv)}/shares`, { user_id: "sharee" })).status, 200);
      assert.is((await admin.put(`${v(world.priv)}/stores/orgs/acme`, undefined)).status, 200);
      assert.is((await owner2.put(`${v(world.pub)}/stores/public`, undefined)).status, 200);
    } catch (error) {
      console.error("access matrix set-up failed:", error);
      throw error;
    }
  });

  for (const protocol of ["REST", "gRPC"] as const) {
    for (const caller of callers) {
      s(`${protocol}: ${caller.name}`, async ({ svc }) => {
        const headers = await caller.headers();
        const entity = caller.entity(world);
        for (const rpc of rpcs) {
          const expected = caller.expect[rpc.kind];
          const call = await rpc.prepare(world, entity);
          const label = `${rpc.rpc} as ${caller.name} over ${protocol}`;
          if (protocol === "REST") {
            const [method, path, body] = call.rest;
            const res = await svc.restAs(headers).request(method, path, body);
            if (expected === "ok") assert.is(res.status, rpc.okStatus ?? 200, `${label}: ${JSON.stringify(res.body)}`);
            else {
              assert.is(res.status, httpStatus[expected], `${label}: ${JSON.stringify(res.body)}`);
              assert.is(res.body.code, restCode(expected, caller), label);
              if (expected === "unauthenticated") assert.ok(res.headers.get("www-authenticate")?.startsWith("Bearer"), label);
            }
          } else {
            const res = await svc.grpcAs(headers).call(rpc.rpc, call.grpc);
            const code = res.ok ? grpc.status.OK : res.error.code;
            assert.is(code, grpcCode[expected], `${label}: ${res.ok ? "ok" : res.error.message}`);
            if (!res.ok) assert.is(res.error.reason, restCode(expected, caller), label);
          }
          await call.cleanup?.();
        }
      });
    }
  }

  s("a caller without access gets exactly the answer of an entity that does not exist", async ({ svc }) => {
    const stranger = svc.restAs(bearer(await token({ sub: "stranger", roles: ["publisher"] })));
    const hiddenAnswer = await stranger.get(`${v(world.priv)}/active-version`);
    const missing = newEntityId("priv");
    const missingAnswer = await stranger.get(`${v(missing)}/active-version`);
    assert.is(hiddenAnswer.status, missingAnswer.status);
    assert.is(hiddenAnswer.body.error.replace(world.priv, "X"), missingAnswer.body.error.replace(missing, "X"));
  });

  return s;
}

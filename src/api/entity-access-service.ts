import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  AddPublisherRequest,
  AddShareRequest,
  EntityAccessSchema,
  EntityAccessService,
  GetEntityAccessRequest,
  PublishToOrgStoreRequest,
  PublishToPublicStoreRequest,
  RemovePublisherRequest,
  RemoveShareRequest,
  UnpublishFromOrgStoreRequest,
  UnpublishFromPublicStoreRequest,
} from "../../gen/entityversions/v1/entity_access_pb.js";
import { principalIdPattern } from "../domain/identifiers.js";
import { decideWrite } from "../auth/policy.js";
import type { Clock } from "../clock.js";
import { apiError } from "../errors/api-error.js";
import type { AccessChange, AccessStore, EntityAccessRecord } from "../store/access-store.js";
import { enforce, refusal, requireCaller, writeAuthorization } from "./authorize.js";
import * as valid from "./validate.js";

type Init<S extends DescMessage> = MessageInitShape<S>;
type AccessAnswer = Promise<{ access: Init<typeof EntityAccessSchema> }>;

/** What the access service is built from. */
export interface EntityAccessDeps {
  readonly access: AccessStore;
  readonly clock: Clock;
}

function principal(value: string, field: string): string {
  if (value === "") throw apiError("INVALID_ARGUMENT", { field, problem: "is required" });
  if (!principalIdPattern.test(value)) {
    throw apiError("INVALID_ARGUMENT", { field, problem: "must be 1 to 255 printable characters of valid UTF-8, without spaces, and not . or .." });
  }
  return value;
}

function toMessage(a: EntityAccessRecord): Init<typeof EntityAccessSchema> {
  return {
    entityId: a.entityId,
    publishers: [...a.publishers],
    shares: [...a.shares],
    orgStores: [...a.orgStores],
    publicStore: a.publicStore,
  };
}

/**
 * The EntityAccessService: who may use an entity. Every RPC is for the
 * entity's publishers (with the publisher role) and for admins; anyone else
 * gets NOT_FOUND or PERMISSION_DENIED as for the versions service's writes.
 * An entity comes into being with its first push; its access can be
 * changed from then on.
 */
export class EntityAccessServiceImpl implements ServiceImpl<typeof EntityAccessService> {
  readonly #d: EntityAccessDeps;

  constructor(deps: EntityAccessDeps) {
    this.#d = deps;
  }

  async #authorize(ctx: HandlerContext, entityIdValue: string): Promise<string> {
    const entityId = valid.entityId(entityIdValue);
    const caller = requireCaller(ctx);
    enforce(decideWrite(caller, await this.#d.access.facts(entityId, caller, ctx.signal)), entityId, caller);
    return entityId;
  }

  async #change(ctx: HandlerContext, entityIdValue: string, change: AccessChange): AccessAnswer {
    const entityId = await this.#authorize(ctx, entityIdValue);
    const caller = requireCaller(ctx);
    const context = { actor: caller.id, at: this.#d.clock.now() };
    // Decided again under the entity's lock: the caller may have lost access meanwhile.
    const outcome = await this.#d.access.change(entityId, change, context, writeAuthorization(caller), ctx.signal);
    if (outcome.kind === "refused") throw refusal(outcome.decision, entityId, caller);
    if (outcome.kind === "entity-missing") throw apiError("ENTITY_NOT_FOUND", { entityId });
    if (outcome.kind === "list-full") throw apiError("ACCESS_LIST_FULL", { entityId, list: outcome.list, limit: outcome.limit });
    if (outcome.kind === "last-publisher") {
      throw apiError("LAST_PUBLISHER", { entityId, userId: (change as { userId: string }).userId });
    }
    return { access: toMessage(outcome.access) };
  }

  async getEntityAccess(req: GetEntityAccessRequest, ctx: HandlerContext): AccessAnswer {
    const entityId = await this.#authorize(ctx, req.entityId);
    const access = await this.#d.access.get(entityId, ctx.signal);
    if (access === undefined) throw apiError("ENTITY_NOT_FOUND", { entityId });
    return { access: toMessage(access) };
  }

  addPublisher(req: AddPublisherRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "add-publisher", userId: principal(req.userId, "user_id") });
  }

  removePublisher(req: RemovePublisherRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "remove-publisher", userId: principal(req.userId, "user_id") });
  }

  addShare(req: AddShareRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "add-share", userId: principal(req.userId, "user_id") });
  }

  removeShare(req: RemoveShareRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "remove-share", userId: principal(req.userId, "user_id") });
  }

  publishToOrgStore(req: PublishToOrgStoreRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "add-org-store", orgId: principal(req.orgId, "org_id") });
  }

  unpublishFromOrgStore(req: UnpublishFromOrgStoreRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "remove-org-store", orgId: principal(req.orgId, "org_id") });
  }

  publishToPublicStore(req: PublishToPublicStoreRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "set-public", value: true });
  }

  unpublishFromPublicStore(req: UnpublishFromPublicStoreRequest, ctx: HandlerContext): AccessAnswer {
    return this.#change(ctx, req.entityId, { op: "set-public", value: false });
  }
}

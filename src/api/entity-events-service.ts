import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  EntityEventsService,
  ListEventsRequest,
  ListEventsResponseSchema,
  WatchEventsRequest,
  WatchEventsResponseSchema,
} from "../../gen/entityversions/v1/entity_events_pb.js";
import type { Caller } from "../auth/caller.js";
import { type AccessFacts, decideRead, decideWrite } from "../auth/policy.js";
import { apiError, reasonOf } from "../errors/api-error.js";
import type { EventHub, Watch } from "../events/event-hub.js";
import { abortError } from "../rpc/deadline-interceptor.js";
import type { AccessStore } from "../store/access-store.js";
import type { EventStore } from "../store/event-store.js";
import { enforce, enforceRead, requireCaller } from "./authorize.js";
import { eventIdOf, toEventMessage } from "./event-message.js";
import type { PageTokens } from "./page-token.js";
import * as valid from "./validate.js";

type Init<S extends DescMessage> = MessageInitShape<S>;

/** What the events service is built from. */
export interface EntityEventsDeps {
  readonly events: EventStore;
  readonly access: AccessStore;
  readonly hub: EventHub;
  /** Page tokens of the events listing (their own scope: a versions token is refused). */
  readonly pageTokens: PageTokens;
}

/** Whether the caller may see whom an entity's access changes were about: as for GetEntityAccess. */
function seesAccessLists(caller: Caller, facts: AccessFacts): boolean {
  return decideWrite(caller, facts) === "allow";
}

/** The longest delay setTimeout keeps (2^31-1 ms, about 24.8 days); a longer wait is taken in steps. */
const maxTimerMs = 2 ** 31 - 1;

/**
 * Ends a watch with TOKEN_EXPIRED, naming the last event it was sent, when
 * its caller's credential stops being accepted: a call checks its
 * credential once, and a watch may stay open far longer than a token
 * lives. Returns what cancels that.
 */
function endAtExpiry(watch: Watch, expiresAt: number | undefined): () => void {
  if (expiresAt === undefined) return () => undefined;
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    const left = expiresAt - Date.now();
    if (left > 0) {
      timer = setTimeout(check, Math.min(left, maxTimerMs));
      // The watch keeps the server busy, not the process alive.
      timer.unref();
      return;
    }
    watch.end((position) => apiError("TOKEN_EXPIRED", position === undefined ? {} : { lastEventId: eventIdOf(position) }));
  };
  check();
  return () => clearTimeout(timer);
}

/**
 * The EntityEventsService: an entity's audit trail (ListEvents) and its
 * live feed (WatchEvents), for anyone who may read the entity.
 */
export class EntityEventsServiceImpl implements ServiceImpl<typeof EntityEventsService> {
  readonly #d: EntityEventsDeps;

  constructor(deps: EntityEventsDeps) {
    this.#d = deps;
  }

  async listEvents(req: ListEventsRequest, ctx: HandlerContext): Promise<Init<typeof ListEventsResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const size = valid.pageSize(req.pageSize);
    const caller = requireCaller(ctx);
    const beforeSeq = this.#d.pageTokens.startOf(req.pageToken, entityId);
    // One query: the page and the caller's access together.
    const page = enforceRead(await this.#d.events.page(entityId, beforeSeq, size, caller, ctx.signal), entityId, caller);
    const showSubjects = seesAccessLists(caller, page.facts);
    return {
      events: page.events.map((e) => toEventMessage(e, showSubjects)),
      nextPageToken: this.#d.pageTokens.nextAfter(entityId, page.hasMore, page.events[page.events.length - 1]?.seq),
    };
  }

  /**
   * Streams the events after after_event_id (none when it is empty), then a
   * bookmark, then each new event as the hub gets it, with a bookmark after
   * each quiet keep-alive interval. The watch is registered before the
   * entity's position is read, so nothing committed after that read can be
   * missed; events are numbered without gaps, so each is sent once, in
   * order. Read access is checked at the start and again before each batch
   * of events that changes access; without it the stream ends as a call
   * without access would (ENTITY_NOT_FOUND). When the caller's token expires, the
   * stream ends with TOKEN_EXPIRED naming the last event sent, to resume
   * from with a new token.
   */
  async *watchEvents(req: WatchEventsRequest, ctx: HandlerContext): AsyncGenerator<Init<typeof WatchEventsResponseSchema>> {
    const entityId = valid.entityId(req.entityId);
    const after = valid.eventId(req.afterEventId, "after_event_id");
    const caller = requireCaller(ctx);
    const watch = this.#d.hub.open(entityId, caller.id);
    const stopExpiry = endAtExpiry(watch, caller.expiresAt);
    // Freed when the call ends, not only when this generator does: a
    // client that stops reading, then resets its stream, leaves the
    // generator paused at a yield nobody resumes, and its finally unrun.
    const release = () => {
      stopExpiry();
      watch.close();
    };
    ctx.signal.addEventListener("abort", release, { once: true });
    try {
      const start = enforceRead(await watch.bounded(ctx.signal, (signal) => this.#d.events.position(entityId, caller, signal)), entityId, caller);
      if (after !== undefined && after > start.lastEventSeq) {
        throw apiError("INVALID_ARGUMENT", {
          field: "after_event_id",
          problem: `"${req.afterEventId}" is not an event of entity "${entityId}" (its last is "${eventIdOf(start.lastEventSeq)}"): pass the id of an event or bookmark this entity's events carried, or none to watch from now`,
        });
      }
      let showSubjects = seesAccessLists(caller, start.facts);
      watch.start(after ?? start.lastEventSeq, start.lastEventSeq);
      const bookmark = () => ({ kind: { case: "bookmark" as const, value: { lastEventId: eventIdOf(watch.position!) } } });
      let live = watch.position! >= start.lastEventSeq;
      if (live) yield bookmark();
      for (;;) {
        const events = await watch.next(ctx.signal);
        if (events.length === 0) yield bookmark();
        // An access change may end the caller's access, or change what they
        // may see of the events: checked once for the batch, before any of
        // it is sent (a replay of thousands of access changes is one read a
        // batch, not one an event), from the access as it is now.
        if (events.some((event) => event.type === "ACCESS_CHANGED")) {
          showSubjects = await watch.bounded(ctx.signal, (signal) => this.#stillReadable(entityId, caller, signal));
        }
        for (const event of events) {
          // Passed before it is sent: a stream delivers in order, so a
          // client told where the stream ended has received everything before.
          watch.passed(event.seq);
          yield { kind: { case: "event", value: toEventMessage(event, showSubjects) } };
          if (!live && event.seq >= start.lastEventSeq) {
            live = true;
            yield bookmark();
          }
        }
      }
    } catch (error) {
      // The call's signal: its deadline, the client gone, the server stopping.
      if (!ctx.signal.aborted || error !== ctx.signal.reason) throw error;
      const ended = abortError(error);
      // A watch's deadline is its client's: it says where to resume, as the other ends of a watch do.
      if (reasonOf(ended) === "DEADLINE_EXCEEDED" && watch.position !== undefined) throw apiError("DEADLINE_EXCEEDED", { lastEventId: eventIdOf(watch.position) }, { cause: error });
      throw ended;
    } finally {
      ctx.signal.removeEventListener("abort", release);
      release();
    }
  }

  /**
   * Throws ENTITY_NOT_FOUND (as for a call without access) unless the
   * caller may still read the entity; whether they may see its access
   * lists, when they may.
   */
  async #stillReadable(entityId: string, caller: Caller, signal: AbortSignal): Promise<boolean> {
    const facts = await this.#d.access.facts(entityId, caller, signal);
    enforce(decideRead(caller, facts), entityId, caller);
    return seesAccessLists(caller, facts);
  }
}

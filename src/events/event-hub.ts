import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";
import { deadlineSignal } from "../rpc/deadline-signal.js";
import { watchAbandoned } from "../store/abandon.js";
import type { EventRecord } from "../store/event-log.js";

/** Where the hub reads events from: the event log. */
export interface EventSource {
  /** Up to `limit` of the entity's events after `afterSeq`, oldest first. */
  after(entityId: string, afterSeq: number, limit: number, signal?: AbortSignal): Promise<EventRecord[]>;
  /** Up to `limit` events of the given entities, each after its own number, ordered by entity and number: one query, given up when `signal` aborts. */
  poll(cursors: ReadonlyMap<string, number>, limit: number, signal?: AbortSignal): Promise<EventRecord[]>;
}

/** How the hub polls, keeps streams alive, and bounds them. */
export interface EventHubOptions {
  /** How often the database is read for new events while anything is watched. */
  readonly pollIntervalMs: number;
  /** A watch with nothing to send for this long is sent a bookmark. */
  readonly keepaliveMs: number;
  /** Watches this process serves at once. */
  readonly maxWatches: number;
  /** Watches one caller may have open on this process at once. */
  readonly maxWatchesPerCaller: number;
  /**
   * How long one poll may take before it is given up and tried again
   * (default pollTimeoutMs()): a query on a connection that never answers
   * would otherwise hold every watch of the process, keep-alives still
   * telling their clients they are live.
   */
  readonly pollTimeoutMs?: number;
  /** Told of the first failed poll of a run of failures (each next poll retries), and when polls succeed again. */
  readonly onPollError?: (error: unknown) => void;
  readonly onPollRecovered?: () => void;
  /**
   * Told when a poll finds an entity's events missing after the last one it
   * read: deleted for age before this replica read them (a retention
   * shorter than the replica's lag), or removed by hand. Watches that need
   * them end with EVENTS_EXPIRED.
   */
  readonly onGap?: (entityId: string, afterSeq: number, nextSeq: number) => void;
}

/** A poll's default time limit: several intervals, and never under 5 s, so that a slow database is not read as a dead one. */
export function pollTimeoutMs(pollIntervalMs: number): number {
  return Math.max(5_000, 4 * pollIntervalMs);
}

/** Most events a poll reads; when it reads this many, it reads again at once. */
const pollLimit = 1000;
/** Events a watch reads from the database at a time while it catches up. */
const replayBatch = 100;
/** Recent events kept per watched entity, so that watches a little behind read them from memory. */
const recentMax = 64;

/** A watched entity: how far the hub has read its events, the latest of them, and its watches. */
class Channel {
  /** The number of the last event read (every event up to it is known); undefined until a watch has started. */
  cursor: number | undefined;
  /** The events up to `cursor`, with no gaps, at most recentMax. */
  recent: EventRecord[] = [];
  readonly watches = new Set<Watch>();

  /**
   * Takes events read after the cursor, in order; returns whether any was
   * new. `onGap` hears of events missing between the cursor and the next
   * one read.
   */
  take(events: readonly EventRecord[], onGap?: (afterSeq: number, nextSeq: number) => void): boolean {
    let advanced = false;
    for (const event of events) {
      if (this.cursor === undefined || event.seq <= this.cursor) continue;
      // Numbers have no gaps but where events were deleted for age
      // (EVENT_RETENTION_DAYS): past cursor + 1, those between are gone,
      // and a watch that still needs them learns so in next().
      if (event.seq !== this.cursor + 1) {
        onGap?.(this.cursor, event.seq);
        this.recent = [];
      }
      this.recent.push(event);
      this.cursor = event.seq;
      advanced = true;
    }
    if (this.recent.length > recentMax) this.recent.splice(0, this.recent.length - recentMax);
    return advanced;
  }
}

/**
 * One watch of one entity's events: where it stands (the number of the last
 * event it passed) and how it waits for the next ones. Made by
 * EventHub.open; closed by its owner when the stream ends, however it ends.
 */
export class Watch {
  readonly entityId: string;
  readonly callerId: string;
  readonly #hub: EventHub;
  readonly #channel: Channel;
  #position: number | undefined;
  #ending: ((position: number | undefined) => ConnectError) | undefined;
  #wake: (() => void) | undefined;
  #lastSentAt = Date.now();
  #closed = false;
  /**
   * Whether the event after the position is known to be kept: memory may
   * still hold events another replica has since deleted for age, so a
   * watch that resumes behind the present reads its first batch from the
   * database, which says whether it can go on (EVENTS_EXPIRED otherwise).
   */
  #kept = false;
  /**
   * The entity's last event when the watch started: known to exist, so
   * read at once even while the hub's cursor, set by an earlier watch,
   * waits for the next poll to reach it.
   */
  #known = 0;
  /**
   * Reads the watch stopped waiting for (its client gone, its time limit
   * passed) that still hold a pooled connection or a place in the pool's
   * queue: the watch's place is kept until they end, as the call gate keeps
   * a unary call's, so that a caller opening and resetting watches cannot
   * start reads without bound.
   */
  readonly #abandoned = new Set<Promise<void>>();
  #released = false;
  /** Since when the stream has been away from next() (sending what it was given); undefined while it waits in next() or has not begun. */
  #awaySince: number | undefined;

  /** Made by EventHub.open only. */
  constructor(hub: EventHub, channel: Channel, entityId: string, callerId: string) {
    this.#hub = hub;
    this.#channel = channel;
    this.entityId = entityId;
    this.callerId = callerId;
  }

  /** The number of the last event this watch passed; undefined before start. */
  get position(): number | undefined {
    return this.#position;
  }

  /**
   * Starts the watch after event `afterSeq`, the entity's last event being
   * `lastEventSeq` now (read after the watch was registered, so nothing
   * committed after that read can be missed).
   */
  start(afterSeq: number, lastEventSeq: number): void {
    this.#position = afterSeq;
    this.#kept = afterSeq >= lastEventSeq;
    this.#known = lastEventSeq;
    this.#channel.cursor ??= lastEventSeq;
    this.#hub.started(this.entityId);
  }

  /** Records that the events up to `seq` were handed to the stream. */
  passed(seq: number): void {
    this.#position = seq;
  }

  /**
   * The next events after the watch's position, in order: from memory when
   * the hub has them, else from the database (a replay, or a watch far
   * behind). When there are none yet, waits until there are, and answers
   * none once the keep-alive interval has passed with nothing sent.
   * Rejects when the watch was ended (the server stopping, the token
   * expiring), when `signal` aborts, and with EVENTS_EXPIRED when events
   * it still needs were deleted for age.
   */
  async next(signal: AbortSignal): Promise<EventRecord[]> {
    this.#awaySince = undefined;
    try {
      return await this.#next(signal);
    } finally {
      this.#awaySince = Date.now();
    }
  }

  async #next(signal: AbortSignal): Promise<EventRecord[]> {
    for (;;) {
      if (this.#ending !== undefined) throw this.#ending(this.#position);
      if (signal.aborted) throw signal.reason;
      const position = this.#position!;
      const { cursor, recent } = this.#channel;
      const last = Math.max(cursor ?? 0, this.#known);
      if (last > position) {
        const first = recent[0];
        const events =
          this.#kept && first !== undefined && first.seq <= position + 1 && cursor !== undefined && cursor > position
            ? recent.slice(position + 1 - first.seq, position + 1 - first.seq + replayBatch)
            : await this.#read(position, signal);
        // Numbers have no gaps and the events up to the cursor were read:
        // a first event past position + 1, or none, means those between
        // were deleted for age while this watch was behind.
        if (events[0]?.seq !== position + 1) {
          throw apiError("EVENTS_EXPIRED", { entityId: this.entityId, afterEventId: String(position), prunedThrough: String((events[0]?.seq ?? last + 1) - 1) });
        }
        this.#kept = true;
        this.#lastSentAt = Date.now();
        return events;
      }
      const quietFor = Date.now() - this.#lastSentAt;
      if (quietFor >= this.#hub.options.keepaliveMs) {
        this.#lastSentAt = Date.now();
        return [];
      }
      await this.#sleep(this.#hub.options.keepaliveMs - quietFor, signal);
    }
  }

  /** Reads the events after `position` from the database, given up as a poll is. */
  #read(position: number, signal: AbortSignal): Promise<EventRecord[]> {
    return this.bounded(signal, (bounded) => this.#hub.source.after(this.entityId, position, replayBatch, bounded));
  }

  /**
   * Runs one of the watch's database reads (its own, or its caller's: the
   * start's position, an access check) under the poll's time limit: a
   * stream has no deadline of its own, and a read waiting on a connection
   * that never answers would hold the watch's slot and send nothing.
   * Given up, it rejects DATABASE_UNAVAILABLE, which clients resume from.
   */
  async bounded<T>(signal: AbortSignal, read: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const bound = deadlineSignal(signal, this.#hub.pollTimeoutMs, () => apiError("DATABASE_UNAVAILABLE", {}));
    watchAbandoned(bound.signal, (work) => this.#holdUntil(work));
    try {
      return await read(bound.signal);
    } finally {
      bound.dispose();
    }
  }

  /** Waits until woken (new events, the end), the time passes, or the signal aborts. */
  #sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.#wake = done;
    });
  }

  /** New events, or the end: whoever waits looks again. */
  wake(): void {
    this.#wake?.();
  }

  /**
   * Ends the watch: its next() rejects with the error `reason` makes of the
   * position the watch has reached by then (events of a batch already in
   * hand may still pass after this call), so that an error naming where to
   * resume names the last event the client was sent.
   */
  end(reason: (position: number | undefined) => ConnectError): void {
    this.#ending ??= reason;
    this.wake();
    // A stream whose client stopped reading is paused at a write, away
    // from next(), and would learn of its end only when the client read
    // again: its place (under the watch caps, and in a shutdown's wait) is
    // given back once it has been away that long. Its stream ends with the
    // connection, or with the end's error if the client reads again.
    // Checked until it is closed: one inside next() when ended (a read
    // under way) may come back with a batch and then stall on it.
    const check = () => {
      if (this.#closed) return;
      const away = this.#awaySince === undefined ? 0 : Date.now() - this.#awaySince;
      if (away >= stalledAfterMs) return this.close();
      setTimeout(check, stalledAfterMs - away).unref();
    };
    setTimeout(check, stalledAfterMs).unref();
  }

  #holdUntil(work: Promise<unknown>): void {
    // At most heldReadMaxMs: a read on a connection that never answers
    // (until TCP gives up, minutes later) gives the place back by then.
    let timer: NodeJS.Timeout | undefined;
    const settled = Promise.race([
      work.then(
        () => undefined,
        () => undefined,
      ),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, heldReadMaxMs);
        timer.unref();
      }),
    ]).finally(() => clearTimeout(timer));
    this.#abandoned.add(settled);
    void settled.then(() => {
      this.#abandoned.delete(settled);
      if (this.#closed) this.#release();
    });
  }

  #release(): void {
    if (this.#released || this.#abandoned.size > 0) return;
    this.#released = true;
    this.#hub.released(this);
  }

  /** Unregisters the watch (its place is given back once the reads it abandoned end); idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.wake();
    this.#hub.closed(this, this.#channel);
    // Once the abort that closed it (the call's) has reached its reads'
    // signals, each of which then reports the read it abandons.
    queueMicrotask(() => this.#release());
  }
}

/** The longest an abandoned read keeps its watch's place (as long as a unary call's default deadline). */
const heldReadMaxMs = 30_000;

/**
 * How long an ended watch may stay away from next() before it is taken for
 * one whose client stopped reading: a stream whose client reads hands
 * over a batch in far less.
 */
const stalledAfterMs = 2_000;

/**
 * Fans out an entity's new events to every watch of it in this process.
 * One poller per process, running only while something is watched, reads
 * the new events of every watched entity with one query per interval (so
 * replicas see each other's changes within about one interval), and each
 * watch takes them from memory; in-process writers prompt a poll at once
 * (`recorded`), which is also how SQLite, one process only, delivers
 * without waiting. Bounds the watches per process and per caller, and ends
 * every watch when the server stops.
 */
export class EventHub {
  readonly source: EventSource;
  readonly options: EventHubOptions;
  readonly #channels = new Map<string, Channel>();
  readonly #perCaller = new Map<string, number>();
  #watches = 0;
  #timer: NodeJS.Timeout | undefined;
  #polling = false;
  /** Watched entities this process recorded events of since they were last read: a prompt reads only these. */
  readonly #prompted = new Set<string>();
  /** Entities prompted when their channel had no cursor yet: prompted again once a watch starts them. */
  readonly #promptedUnstarted = new Set<string>();
  /** When the next poll of every watched entity (other replicas' events) is due. */
  #nextFullPollAt = 0;
  #closing = false;

  /** How long one read of events may go unanswered before it is given up. */
  get pollTimeoutMs(): number {
    return this.options.pollTimeoutMs ?? pollTimeoutMs(this.options.pollIntervalMs);
  }
  #failing = false;
  #drained: (() => void) | undefined;

  constructor(source: EventSource, options: EventHubOptions) {
    this.source = source;
    this.options = options;
  }

  /** Watches open now. */
  get size(): number {
    return this.#watches;
  }

  /**
   * Registers a watch of an entity for a caller; throws TOO_MANY_WATCHES
   * past the bounds, and SHUTTING_DOWN once the hub is closing. The caller
   * then reads where the entity stands and starts the watch.
   */
  open(entityId: string, callerId: string): Watch {
    if (this.#closing) throw apiError("SHUTTING_DOWN", {});
    if (this.#watches >= this.options.maxWatches) throw apiError("TOO_MANY_WATCHES", { limit: this.options.maxWatches, scope: "server" });
    const mine = this.#perCaller.get(callerId) ?? 0;
    if (mine >= this.options.maxWatchesPerCaller) throw apiError("TOO_MANY_WATCHES", { limit: this.options.maxWatchesPerCaller, scope: "caller" });
    let channel = this.#channels.get(entityId);
    if (channel === undefined) this.#channels.set(entityId, (channel = new Channel()));
    const watch = new Watch(this, channel, entityId, callerId);
    channel.watches.add(watch);
    this.#watches++;
    this.#perCaller.set(callerId, mine + 1);
    return watch;
  }

  /** Called by Watch.close: the watch is fed no more events. */
  closed(watch: Watch, channel: Channel): void {
    if (!channel.watches.delete(watch)) return;
    if (channel.watches.size === 0) {
      this.#channels.delete(watch.entityId);
      this.#promptedUnstarted.delete(watch.entityId);
    }
    if (this.#channels.size === 0) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  /** Called once a closed watch's abandoned reads have ended: its place is free. */
  released(watch: Watch): void {
    this.#watches--;
    const mine = (this.#perCaller.get(watch.callerId) ?? 1) - 1;
    if (mine === 0) this.#perCaller.delete(watch.callerId);
    else this.#perCaller.set(watch.callerId, mine);
    if (this.#watches === 0) this.#drained?.();
  }

  /**
   * Told that a transaction of this process committed events of these
   * entities: when any is watched, read them now rather than at the next
   * interval; only them, so that a stream of changes to one entity does
   * not read every watched entity once per change. Other replicas' events
   * are read by the full poll, which keeps its interval whatever the
   * prompts.
   */
  recorded(entityIds: readonly string[]): void {
    let watched = false;
    for (const id of entityIds) {
      if (!this.#channels.has(id)) continue;
      this.#prompted.add(id);
      watched = true;
    }
    if (watched) this.#schedule(0);
  }

  /**
   * Called when a watch starts: the poller runs while anything is watched,
   * and an entity prompted while its first watch was starting (before it
   * had a cursor to poll from) is read now, not at the next full poll.
   */
  started(entityId: string): void {
    if (this.#promptedUnstarted.delete(entityId)) {
      this.#prompted.add(entityId);
      this.#schedule(0);
    } else if (this.#timer === undefined && !this.#polling) {
      this.#schedule(this.options.pollIntervalMs);
    }
  }

  #schedule(delayMs: number): void {
    // Polling now: the end of this poll schedules the next (a prompt meanwhile is in #prompted).
    if (this.#polling) return;
    if (this.#timer !== undefined) {
      if (delayMs !== 0) return;
      clearTimeout(this.#timer);
    }
    this.#timer = setTimeout(() => void this.#poll(), delayMs);
    // Watches keep the server, not the process, alive.
    this.#timer.unref();
  }

  async #poll(): Promise<void> {
    this.#timer = undefined;
    if (this.#closing) return;
    // Every watched entity when the full poll is due (or nothing was
    // prompted), else only the prompted ones.
    const everything = Date.now() >= this.#nextFullPollAt || this.#prompted.size === 0;
    const prompted = [...this.#prompted];
    const entities = everything ? [...this.#channels.keys()] : prompted;
    this.#prompted.clear();
    if (everything) this.#nextFullPollAt = Date.now() + this.options.pollIntervalMs;
    const cursors = new Map<string, number>();
    for (const entityId of entities) {
      const cursor = this.#channels.get(entityId)?.cursor;
      if (cursor !== undefined) cursors.set(entityId, cursor);
    }
    for (const entityId of prompted) if (this.#channels.has(entityId) && !cursors.has(entityId)) this.#promptedUnstarted.add(entityId);
    if (cursors.size === 0) {
      if (this.#channels.size > 0) this.#schedule(Math.max(0, this.#nextFullPollAt - Date.now()));
      return;
    }
    this.#polling = true;
    let more = false;
    try {
      const bound = deadlineSignal(undefined, this.pollTimeoutMs, () => new Error(`no answer within ${this.pollTimeoutMs} ms`));
      const events = await this.source.poll(cursors, pollLimit, bound.signal).finally(() => bound.dispose());
      // More than one read holds: read the same again at once.
      more = events.length >= pollLimit;
      if (more) {
        if (everything) this.#nextFullPollAt = 0;
        else for (const entityId of cursors.keys()) this.#prompted.add(entityId);
      }
      const byEntity = new Map<string, EventRecord[]>();
      for (const event of events) {
        const list = byEntity.get(event.entityId);
        if (list === undefined) byEntity.set(event.entityId, [event]);
        else list.push(event);
      }
      for (const [entityId, list] of byEntity) {
        const channel = this.#channels.get(entityId);
        const onGap = (afterSeq: number, nextSeq: number) => this.options.onGap?.(entityId, afterSeq, nextSeq);
        if (channel?.take(list, onGap) === true) for (const watch of channel.watches) watch.wake();
      }
      if (this.#failing) this.options.onPollRecovered?.();
      this.#failing = false;
    } catch (error) {
      // Watches wait (and keep their keep-alives) until the database answers again.
      if (!this.#failing) this.options.onPollError?.(error);
      this.#failing = true;
    } finally {
      this.#polling = false;
    }
    if (this.#channels.size > 0) this.#schedule(more || this.#prompted.size > 0 ? 0 : Math.max(0, this.#nextFullPollAt - Date.now()));
  }

  /**
   * Ends every watch with SHUTTING_DOWN, naming the last event each passed
   * (so its client resumes elsewhere from there), refuses new ones, and
   * resolves once every watch has closed, or after `waitMs`.
   */
  async close(waitMs: number): Promise<void> {
    this.#closing = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#watches === 0) return;
    const drained = new Promise<void>((resolve) => (this.#drained = resolve));
    for (const channel of this.#channels.values()) {
      for (const watch of channel.watches) {
        watch.end((position) => apiError("SHUTTING_DOWN", position === undefined ? {} : { lastEventId: String(position) }));
      }
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([drained, new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)))]);
    clearTimeout(timer);
  }
}

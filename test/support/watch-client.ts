// Watches of an entity's events (WatchEvents) from the outside, over each
// protocol: gRPC through @grpc/grpc-js, REST as newline-delimited JSON over
// plain HTTP/1.1, Connect and gRPC-Web through connect-node's clients. Every
// watch reads into the same queue, so a test (or a benchmark opening idle
// watchers) treats them alike.
import http from "node:http";
import { toJson } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { EntityEventsService, WatchEventsResponseSchema } from "../../gen/entityversions/v1/entity_events_pb.js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { Backend } from "./env.js";
import { failure, GrpcClient, grpc } from "./grpc-client.js";
import { apiDocument } from "./openapi.js";
import { answersSeen } from "./service.js";

/** One message of a watch, whatever its protocol: an event (its identity and what changed) or a bookmark. */
export type WatchItem =
  | {
      readonly kind: "event";
      readonly id: string;
      /** The EventType name without its prefix: VERSION_CREATED, … */
      readonly type: string;
      readonly actor: string;
      readonly versionId: string;
      readonly previousActiveVersionId: string;
      /** "SHARE_ADDED:bob", … ("" for other events). */
      readonly access: string;
    }
  | { readonly kind: "bookmark"; readonly lastEventId: string };

/** How a watch ended: its gRPC status code (0: ended without error) and catalog reason, or for REST the HTTP status of an answer refused before the stream. */
export interface WatchEnd {
  readonly code: number;
  readonly reason: string | undefined;
  readonly message: string;
  /** The error's google.rpc.ErrorInfo metadata (gRPC, Connect, gRPC-Web). */
  readonly metadata: Record<string, string>;
  /** REST only: the answer's HTTP status (200 once the stream began). */
  readonly httpStatus?: number;
}

/** A watch's messages as they arrive, and how it ended. */
export class WatchStream {
  readonly received: WatchItem[] = [];
  #read = 0;
  #end: WatchEnd | undefined;
  #waiters: Array<() => void> = [];
  readonly #cancel: () => void;

  constructor(cancel: () => void) {
    this.#cancel = cancel;
  }

  /** Called by the protocol's reader. */
  push(item: WatchItem): void {
    this.received.push(item);
    this.#notify();
  }

  /** Called by the protocol's reader, once. */
  finish(end: WatchEnd): void {
    this.#end ??= end;
    this.#notify();
  }

  #notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  async #until<T>(ready: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = ready();
      if (value !== undefined) return value;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs} ms; received ${JSON.stringify(this.received)}; ended ${JSON.stringify(this.#end)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The next message not yet read; throws if the watch ends or nothing comes in time. */
  next(timeoutMs = 5_000): Promise<WatchItem> {
    return this.#until(
      () => {
        if (this.#read < this.received.length) return this.received[this.#read++];
        if (this.#end !== undefined) throw new Error(`the watch ended (${JSON.stringify(this.#end)}) after ${JSON.stringify(this.received)}`);
        return undefined;
      },
      timeoutMs,
      "message",
    );
  }

  /** The next `n` events, skipping bookmarks. */
  async events(n: number, timeoutMs = 5_000): Promise<Array<Extract<WatchItem, { kind: "event" }>>> {
    const deadline = Date.now() + timeoutMs;
    const events: Array<Extract<WatchItem, { kind: "event" }>> = [];
    while (events.length < n) {
      const item = await this.next(Math.max(1, deadline - Date.now()));
      if (item.kind === "event") events.push(item);
    }
    return events;
  }

  /** The next bookmark, skipping nothing: throws if an event comes first. */
  async bookmark(timeoutMs = 5_000): Promise<string> {
    const item = await this.next(timeoutMs);
    if (item.kind !== "bookmark") throw new Error(`expected a bookmark, got ${JSON.stringify(item)}`);
    return item.lastEventId;
  }

  /** How the watch ended, once it has. */
  ended(timeoutMs = 5_000): Promise<WatchEnd> {
    return this.#until(() => this.#end, timeoutMs, "end");
  }

  /** Whether the watch has ended. */
  get done(): boolean {
    return this.#end !== undefined;
  }

  /** Ends the watch from the client's side. */
  close(): void {
    this.#cancel();
  }
}

const prefix = (value: string, p: string) => (value.startsWith(p) ? value.slice(p.length) : value);

/** A WatchEventsResponse in proto JSON (snake_case, enums by name) as a WatchItem. */
function itemOf(json: Record<string, any>): WatchItem {
  if (json["bookmark"] !== undefined && json["bookmark"] !== null) return { kind: "bookmark", lastEventId: String(json["bookmark"].last_event_id) };
  const e = json["event"];
  const change = e.access_change;
  return {
    kind: "event",
    id: String(e.id),
    type: prefix(String(e.type), "EVENT_TYPE_"),
    actor: String(e.actor),
    versionId: e.version_id ?? "",
    previousActiveVersionId: e.previous_active_version_id ?? "",
    access: change === undefined || change === null ? "" : `${prefix(String(change.kind), "ACCESS_CHANGE_KIND_")}:${change.subject_id ?? ""}`,
  };
}

/** Watches over gRPC with @grpc/grpc-js. */
export function watchGrpc(client: GrpcClient, entityId: string, options: { afterEventId?: string; metadata?: Record<string, string>; deadlineMs?: number } = {}): WatchStream {
  const call = client.stream("WatchEvents", { entity_id: entityId, after_event_id: options.afterEventId ?? "" }, options);
  const stream = new WatchStream(() => call.cancel());
  call.on("data", (m: Record<string, any>) => {
    // proto-loader with defaults: the unset side of the oneof is null; unset optional strings are "".
    const event = m["event"];
    stream.push(
      m["kind"] === "bookmark"
        ? itemOf({ bookmark: m["bookmark"] })
        : itemOf({ event: { ...event, access_change: event.type === "EVENT_TYPE_ACCESS_CHANGED" ? event.access_change : undefined } }),
    );
  });
  call.on("error", (error: grpc.ServiceError) => {
    const f = failure(error);
    // grpc-js decodes grpc-message with decodeURI, which leaves %3A and the like.
    let message = f.message;
    try {
      message = decodeURIComponent(message);
    } catch {
      // not percent-encoded after all
    }
    stream.finish({ code: f.code, reason: f.reason, message, metadata: f.metadata });
  });
  call.on("end", () => stream.finish({ code: 0, reason: undefined, message: "", metadata: {} }));
  return stream;
}

/**
 * Watches over REST: GET …/events:watch on a plain HTTP/1.1 connection of
 * its own, reading newline-delimited JSON as it comes. The answer, and
 * each line, is held to the OpenAPI document (and counted for its coverage
 * check) when `backend` is given.
 */
export function watchRest(
  url: string,
  entityId: string,
  headers: Record<string, string>,
  options: { afterEventId?: string; backend?: Backend } = {},
): WatchStream {
  const path = `/api/entities/${encodeURIComponent(entityId)}/events:watch${options.afterEventId === undefined ? "" : `?after_event_id=${encodeURIComponent(options.afterEventId)}`}`;
  const req = http.request(new URL(path, url), { method: "GET", headers, agent: false });
  const stream = new WatchStream(() => req.destroy());
  const check = (status: number, resHeaders: Headers, body: unknown) => {
    if (options.backend !== undefined) apiDocument().check({ method: "GET", path, status, headers: resHeaders, body }, answersSeen[options.backend]);
  };
  req.on("response", (res) => {
    const resHeaders = new Headers(Object.entries(res.headers).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)] as [string, string]])));
    let buffered = "";
    res.setEncoding("utf8");
    if (res.statusCode !== 200) {
      res.on("data", (d: string) => (buffered += d));
      res.on("end", () => {
        const body = JSON.parse(buffered) as Record<string, string>;
        check(res.statusCode ?? 0, resHeaders, body);
        stream.finish({ code: -1, reason: body["code"], message: String(body["error"]), metadata: {}, httpStatus: res.statusCode ?? 0 });
      });
      return;
    }
    res.on("data", (d: string) => {
      buffered += d;
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const line = JSON.parse(buffered.slice(0, nl)) as Record<string, any>;
        buffered = buffered.slice(nl + 1);
        check(200, resHeaders, [line]);
        if (line["error"] !== undefined) {
          stream.finish({ code: -1, reason: line["error"].code, message: line["error"].error, metadata: {}, httpStatus: 200 });
        } else {
          stream.push(itemOf(line["result"]));
        }
      }
    });
    res.on("end", () => stream.finish({ code: 0, reason: undefined, message: "", metadata: {}, httpStatus: 200 }));
    res.on("error", () => undefined);
  });
  req.on("error", (error) => stream.finish({ code: -1, reason: undefined, message: error.message, metadata: {} }));
  req.end();
  return stream;
}

/** Watches over Connect or gRPC-Web with connect-node's client. */
export function watchConnect(
  url: string,
  protocol: "connect" | "grpc-web",
  entityId: string,
  headers: Record<string, string>,
  options: { afterEventId?: string } = {},
): WatchStream {
  const transport = protocol === "connect" ? createConnectTransport({ baseUrl: url, httpVersion: "1.1" }) : createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" });
  const client = createClient(EntityEventsService, transport);
  const abort = new AbortController();
  const stream = new WatchStream(() => abort.abort());
  void (async () => {
    try {
      for await (const m of client.watchEvents({ entityId, afterEventId: options.afterEventId ?? "" }, { headers, signal: abort.signal })) {
        stream.push(itemOf(toJson(WatchEventsResponseSchema, m, { useProtoFieldName: true }) as Record<string, any>));
      }
      stream.finish({ code: 0, reason: undefined, message: "", metadata: {} });
    } catch (error) {
      const e = ConnectError.from(error);
      const info = e.findDetails(ErrorInfoSchema)[0];
      stream.finish({ code: e.code ?? Code.Unknown, reason: info?.reason, message: e.rawMessage, metadata: info?.metadata ?? {} });
    }
  })();
  return stream;
}

/**
 * Opens `count` watches of one entity and waits until each is live (has
 * its first bookmark): what a benchmark needs to measure the service with
 * idle watchers connected. REST watches each take an HTTP/1.1 connection;
 * gRPC ones share HTTP/2 connections, at most `streamsPerConnection` each
 * (the server allows 100 streams per connection by default). The server
 * caps watches per caller (WATCH_MAX_PER_CALLER, 20 by default) and per
 * process (WATCH_MAX_PER_PROCESS): pass several callers' headers, or raise
 * the caps.
 */
export async function openIdleWatchers(options: {
  readonly url: string;
  readonly entityId: string;
  /** Request headers (authorization) of the callers, used in turn. */
  readonly callers: ReadonlyArray<Record<string, string>>;
  readonly count: number;
  readonly protocol: "rest" | "grpc";
  readonly streamsPerConnection?: number;
}): Promise<{ watches: WatchStream[]; close(): void }> {
  const { url, entityId, callers, count, protocol } = options;
  const perConnection = options.streamsPerConnection ?? 50;
  const clients: GrpcClient[] = [];
  const watches = Array.from({ length: count }, (_, i) => {
    const headers = callers[i % callers.length]!;
    if (protocol === "rest") return watchRest(url, entityId, headers);
    if (i % perConnection === 0) clients.push(new GrpcClient(url.replace(/^http:\/\//, ""), headers, { "grpc.use_local_subchannel_pool": 1 }));
    return watchGrpc(clients[clients.length - 1]!, entityId, { metadata: headers });
  });
  const close = () => {
    for (const w of watches) w.close();
    for (const c of clients) c.close();
  };
  try {
    await Promise.all(watches.map((w) => w.bookmark(30_000)));
  } catch (error) {
    close();
    throw error;
  }
  return { watches, close };
}

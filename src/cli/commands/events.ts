import { setTimeout as sleep } from "node:timers/promises";
import { type Command, InvalidArgumentError } from "commander";
import { apiPath, backoff, StreamBroken } from "../api-client.js";
import { parseEntityId } from "../arguments.js";
import { CliError, ServiceError, usageError } from "../cli-error.js";
import { type CommonOptions, contextOf, listPage, type PageOptions, prose, repeatedSettings, withCommonOptions, withNextPage, withPageOptions } from "../command-context.js";
import { ExitCode } from "../exit-codes.js";
import { describeVersion, formatTable } from "../output.js";
import type { RestEvent, RestEventList, RestWatchMessage } from "../rest-types.js";
import { EventTypeSchema } from "../../../gen/entityversions/v1/entity_events_pb.js";

const typePrefix = "EVENT_TYPE_";
/** The event types --type takes, from the proto's EventType: VERSION_CREATED, ACTIVE_VERSION_CHANGED, … */
const eventTypes = EventTypeSchema.values.filter((v) => v.number !== 0).map((v) => v.name.slice(typePrefix.length));

/** What an event changed, in words: `activated 2026.11.22-101500 (id 7f3c…), replacing 0b5c…`. */
function describeChange(e: RestEvent): string {
  const version = describeVersion({ version: e.version ?? "?", id: e.version_id ?? "?" });
  switch (e.type.replace(typePrefix, "")) {
    case "VERSION_CREATED":
      return `created ${version}`;
    case "ACTIVE_VERSION_CHANGED":
      return `activated ${version}, replacing ${e.previous_active_version_id ?? "none"}`;
    case "VERSION_DELETED":
      return `deleted ${version}`;
    case "ACCESS_CHANGED": {
      const kind = (e.access_change?.kind ?? "").replace("ACCESS_CHANGE_KIND_", "").toLowerCase().replaceAll("_", " ");
      const subject = e.access_change?.subject_id ?? "";
      return subject === "" ? kind : `${kind}: ${subject}`;
    }
    default:
      return e.type;
  }
}

/** An event type option: VERSION_CREATED, ACTIVE_VERSION_CHANGED, … (any case, EVENT_TYPE_ prefix optional). */
function parseEventType(value: string, previous: string[] = []): string[] {
  const name = value.toUpperCase().replace(typePrefix, "");
  if (!eventTypes.includes(name)) throw new InvalidArgumentError(`an event type is one of ${eventTypes.join(", ")}.`);
  return [...previous, `${typePrefix}${name}`];
}

function parseCount(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError("a count is a whole number of at least 1.");
  return n;
}

/** An event id option: what events and bookmarks carry (a decimal number here, opaque to clients). */
function parseEventId(value: string): string {
  if (!/^\d{1,19}$/.test(value)) throw new InvalidArgumentError("an event id is what `entity-versions events` or a watch printed, e.g. 42 (0: from the first event).");
  return value;
}

type EventsOptions = CommonOptions & PageOptions;

async function listEvents(entity: string, options: EventsOptions): Promise<void> {
  const { output, settings, api } = contextOf(options);
  const page = await listPage<RestEventList>(api(), apiPath("entities", entity, "events"), options);
  output.result(page, () => {
    if (page.events.length === 0) return `${entity} has no events.`;
    const table = formatTable(
      ["id", "occurred at", "by", "change"],
      page.events.map((e) => [e.id, e.occurred_at ?? "", e.actor, describeChange(e)]),
    );
    return withNextPage(table, page.next_page_token, `events ${entity}`, options, settings);
  });
}

interface WatchOptions extends CommonOptions {
  after?: string;
  type?: string[];
  count?: number;
}

/** Error codes after which a watch is resumed rather than ended: the replica stopping, the database away for a moment. */
const resumable = new Set(["SHUTTING_DOWN", "DATABASE_UNAVAILABLE", "DATABASE_BUSY", "AUTH_KEYS_UNAVAILABLE"]);
/**
 * A watch that receives nothing for this long is taken for a connection
 * that died without closing, and resumed: the service sends a bookmark
 * every WATCH_KEEPALIVE_MS of quiet (15 s unless configured).
 */
const idleMs = 90_000;

/**
 * Follows an entity's events as they happen, resuming after every
 * interruption from the last event or bookmark received, so that each event
 * is printed once, in order, whatever happens to the connection or the
 * replica serving it.
 */
async function watch(entity: string, options: WatchOptions): Promise<void> {
  const { output, settings, api: makeApi } = contextOf(options);
  const api = makeApi();
  const types = options.type === undefined ? undefined : new Set(options.type);
  let after = options.after;
  let printed = 0;
  let failures = 0;
  let began = false;
  // Whether the service has answered at all: from then on a refused connection is a replica restarting, and is waited for.
  let reached = false;
  for (;;) {
    let why: string;
    try {
      const path = `${apiPath("entities", entity, "events")}:watch${after === undefined ? "" : `?after_event_id=${encodeURIComponent(after)}`}`;
      for await (const line of api.stream(path, idleMs)) {
        if (line["error"] !== undefined) throw streamError(line["error"]);
        if (!began) output.note(`watching ${entity} ${after === undefined ? "from now" : `after event ${after}`} (Ctrl-C to stop)`);
        began = true;
        failures = 0;
        const message = line["result"] as RestWatchMessage | undefined;
        if (message?.bookmark !== undefined) {
          after = message.bookmark.last_event_id;
          output.item(message, () => undefined);
        } else if (message?.event !== undefined) {
          const event = message.event;
          after = event.id;
          if (types !== undefined && !types.has(event.type)) continue;
          output.item(message, () => `${event.id}  ${event.occurred_at ?? ""}  ${describeChange(event)}  (by ${event.actor})`);
          if (options.count !== undefined && ++printed >= options.count) return;
        }
      }
      why = "the service ended the stream";
    } catch (error) {
      // Whether the stream said so or the next attempt is refused: retrying cannot mend it, so say where to go on from.
      if (error instanceof ServiceError && error.code === "TOKEN_EXPIRED") {
        // The same watch, from where this one stopped: its URL, filters,
        // what is left of its count and its output form, as the next-page
        // and STALE_BASE commands repeat them.
        const { flags, note } = repeatedSettings(settings);
        const same = [
          after === undefined ? "" : ` --after ${after}`,
          ...(options.type ?? []).map((type) => ` --type ${type}`),
          options.count === undefined ? "" : ` --count ${options.count - printed}`,
          options.json === true ? " --json" : "",
        ].join("");
        throw new CliError(error.message, error.code, ExitCode.noAccess, error.body, [
          `get a new token, then go on where this stopped: entity-versions watch ${entity}${same}${flags}${note === "" ? "" : " (with the new --token)"}`,
        ]);
      }
      // An --after the service does not know is the user's argument that is wrong (exit 2), as a refused --page-token is.
      if (!began && options.after !== undefined && error instanceof ServiceError && error.code === "INVALID_ARGUMENT" && error.message.startsWith("Invalid after_event_id")) {
        throw usageError(`--after ${options.after} is not an event of ${entity}: ${error.message.replace(/^Invalid after_event_id: /, "")}. \`entity-versions events ${entity}\` lists them.`);
      }
      reached ||= began || error instanceof ServiceError;
      if (error instanceof StreamBroken) why = error.message;
      // TOO_MANY_WATCHES once the watch has begun: the server may still count the connection just cut.
      else if (error instanceof ServiceError && (resumable.has(error.code) || error.status === 503 || (began && error.code === "TOO_MANY_WATCHES"))) {
        // The service's advice to resume is what this loop does: its first sentence says why.
        why = `${error.message.split(": ")[0]!.replace(/\.$/, "")} (${error.code})`;
      }
      else if (reached && error instanceof CliError && error.code === "SERVICE_UNREACHABLE") why = error.message;
      else throw error;
    }
    // Never at once: a stream cut again and again right after it opens must not become a busy loop.
    const pause = backoff(++failures);
    output.note(`${why.replace(/\.$/, "")}; resuming after event ${after ?? "(none yet)"} in ${pause} ms`);
    await sleep(pause);
  }
}

/** The error a stream ended with, from its last `{"error": …}` line. */
function streamError(body: unknown): ServiceError {
  const record = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  const code = typeof record["code"] === "string" ? record["code"] : "UNKNOWN";
  const message = typeof record["error"] === "string" ? record["error"] : "the stream ended with an error";
  // A stream's errors come after its 200; the code decides the exit code.
  return new ServiceError(200, code, message, record);
}

/** `events` (an entity's audit trail, newest first) and `watch` (its events as they happen). */
export function registerEvents(program: Command): void {
  withCommonOptions(
    withPageOptions(program.command("events"), "events")
      .summary("list an entity's events, newest first")
      .description("Lists an entity's recorded changes, newest first, one page at a time: who created, activated or deleted which version, and who changed its access.")
      .argument("<entity>", "the entity", parseEntityId)
      .addHelpText("after", "\nExamples:\n  $ entity-versions events my-app\n  $ entity-versions events my-app --limit 5 --json")
      .action((entity: string, options: EventsOptions) => listEvents(entity, options)),
  );
  withCommonOptions(
    program.command("watch")
      .summary("print an entity's events as they happen")
      .description(
        prose(`Prints each new event of an entity as it happens, in order, once: from now, or after the
event --after names (0: from the first). Runs until Ctrl-C, until --count events were printed, or until
an error retrying cannot mend: no access, the token expired (it names the --after to go on from), or
EVENTS_EXPIRED (the events after --after are no longer kept). When the connection is cut or the service
replica stops, it resumes after the last event or bookmark received, so nothing is missed or printed twice.
With --json, stdout is newline-delimited JSON: one WatchEventsResponse per line, {"event": …} or
{"bookmark": …} (the id to resume from).`),
      )
      .argument("<entity>", "the entity", parseEntityId)
      .option("--after <event-id>", "start after this event (0: from the first); default: from now", parseEventId)
      .option("--type <type>", `only events of this type (repeatable): ${eventTypes.join(", ")}`, parseEventType)
      .option("--count <n>", "exit 0 once this many events were printed", parseCount)
      .addHelpText(
        "after",
        "\nExamples:\n  $ entity-versions watch my-app\n  $ entity-versions watch my-app --type ACTIVE_VERSION_CHANGED --count 1   # wait for the next activation\n  $ entity-versions watch my-app --after 0 --json | jq -c 'select(.event)'",
      )
      .action((entity: string, options: WatchOptions) => watch(entity, options)),
    'print newline-delimited JSON on stdout: one WatchEventsResponse per line, {"event": …} or {"bookmark": …}',
  );
}

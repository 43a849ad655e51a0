import type { Command } from "commander";
import { parsePageSize } from "./arguments.js";
import { ApiClient, pageQuery } from "./api-client.js";
import { ServiceError, usageError } from "./cli-error.js";
import { Output } from "./output.js";
import { requireToken, resolveSettings, type Settings } from "./settings.js";

/** The options every command takes: where, as whom, and how to print. */
export interface CommonOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

/**
 * Adds the options every command takes. They are declared on each command
 * rather than once on the program, because `push` has a `--version` of its
 * own which a program-wide option parser would take for the CLI's version.
 * `json` says what `--json` prints, for the commands whose output is not
 * one REST answer (`watch`, `whoami`).
 */
export function withCommonOptions(command: Command, json = "print exactly one JSON document on stdout: the REST answer of the final call"): Command {
  return command
    .option("--url <url>", "the service's base URL (default: $ENTITY_VERSIONS_URL, else http://localhost:8080)")
    .option("--token <jwt>", "bearer token (default: $ENTITY_VERSIONS_TOKEN, else ./data/dev-token, or $DATA_DIR/dev-token, when present)")
    .option("--json", json);
}

/** The options of a paginated listing (AIP-158), the same on every such command. */
export interface PageOptions {
  limit?: number;
  pageToken?: string;
}

/** Adds `--limit` and `--page-token` to a listing of `what` ("versions", "events"). */
export function withPageOptions(command: Command, what: string): Command {
  return command
    .option("--limit <n>", `${what} per page, 1-1000 (default: the service's, 50)`, parsePageSize)
    .option("--page-token <token>", "the page after the one that printed this token");
}

/**
 * One page of a listing. A --page-token the service refuses is the user's
 * argument that is wrong (copied short, or from another entity's list), so
 * it is a usage error (exit 2) that says where tokens come from, not a
 * failure a retry could mend.
 */
export async function listPage<T>(api: ApiClient, path: string, options: PageOptions): Promise<T> {
  try {
    return (await api.call<T>("GET", `${path}${pageQuery(options)}`)).body;
  } catch (error) {
    if (options.pageToken !== undefined && error instanceof ServiceError && error.code === "INVALID_ARGUMENT" && error.message.startsWith("Invalid page_token")) {
      throw usageError(`--page-token ${JSON.stringify(options.pageToken)} is not a token this service printed for this entity's list (or the service's PAGE_TOKEN_SECRET was replaced since): use the one the previous page printed, or leave --page-token out for the first page.`);
    }
    throw error;
  }
}

/** A value as one shell word, quoted where a shell would read it otherwise: a printed command is there to be pasted. */
export const shellWord = (value: string) => (/^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, "'\\''")}'`);

/**
 * What a command the CLI prints for the user to run next must repeat of
 * this one's settings to reach the same service: its --url when a flag
 * gave it (the environment gives it again), and a note under the command
 * when a flag gave the token, which is not repeated into the terminal.
 */
export function repeatedSettings(settings: Settings): { readonly flags: string; readonly note: string } {
  return {
    flags: settings.urlSource === "--url" ? ` --url ${shellWord(settings.url)}` : "",
    note: settings.tokenSource === "--token" ? "(with the same --token)" : "",
  };
}

/**
 * A page's table, and when more follow, the command that prints the next
 * page: with this one's --limit, and its --url when a flag gave it (a token
 * given by flag is not repeated into the terminal; it is asked for again).
 */
export function withNextPage(table: string, nextPageToken: string, command: string, page: PageOptions, settings: Settings): string {
  if (nextPageToken === "") return table;
  const limit = page.limit === undefined ? "" : ` --limit ${page.limit}`;
  const { flags, note } = repeatedSettings(settings);
  return `${table}\n\nMore: entity-versions ${command}${limit}${flags} --page-token ${nextPageToken}${note === "" ? "" : `\n${note}`}`;
}

/**
 * Help text written as wrapped lines in the source, made into paragraphs
 * (single line breaks become spaces), so that commander wraps it to the
 * terminal's width instead of breaking lines twice.
 */
export function prose(text: string): string {
  return text.replace(/(?<!\n)\n(?!\n)/g, " ");
}

/** What a command's action works with. */
export interface CommandContext {
  readonly output: Output;
  readonly settings: Settings;
  /** A client with the token; fails with NO_TOKEN (exit 4) when there is none. */
  api(): ApiClient;
}

/** The context of a command from its parsed common options. */
export function contextOf(options: CommonOptions): CommandContext {
  const output = new Output(options.json === true);
  const settings = resolveSettings({ url: options.url, token: options.token });
  return {
    output,
    settings,
    api: () => new ApiClient(settings, requireToken(settings), (line) => output.note(line)),
  };
}

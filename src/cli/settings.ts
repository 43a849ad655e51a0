import fs from "node:fs";
import path from "node:path";
import { CliError } from "./cli-error.js";
import { ExitCode } from "./exit-codes.js";

/** The service `npm start` runs with no configuration. */
export const defaultServiceUrl = "http://localhost:8080";

/**
 * Where `npm start` writes its development token, as shown in messages:
 * under DATA_DIR when it is set (as the service and `npm run token` read
 * it: a second service started with DATA_DIR=./data-mysql signs with a
 * secret of its own), else ./data, relative to the folder it runs in.
 */
function devTokenFile(env: NodeJS.ProcessEnv): string {
  const file = path.join(nonEmpty(env["DATA_DIR"]) ?? "data", "dev-token");
  return path.isAbsolute(file) ? file : `./${file.split(path.sep).join("/")}`;
}

/** Where the CLI talks to and as whom, and where each came from (said in messages). */
export interface Settings {
  /** The service's base URL, without a trailing slash. */
  readonly url: string;
  readonly urlSource: string;
  readonly token: string | undefined;
  readonly tokenSource: string | undefined;
  /** Where `npm start` writes the development token these settings looked for (./data/dev-token unless DATA_DIR says). */
  readonly devTokenFile?: string;
}

/** The global flags that override the environment. */
export interface SettingsFlags {
  url?: string | undefined;
  token?: string | undefined;
}

const nonEmpty = (value: string | undefined): string | undefined => (value === undefined || value.trim() === "" ? undefined : value.trim());

/** A token as given: one pasted with its header's scheme ("Bearer eyJ…") is taken without it. */
const bare = (token: string | undefined): string | undefined => nonEmpty(token?.replace(/^\s*bearer\s+/i, ""));

/** A bearer token's characters (RFC 6750, b64token): what a JWT is written in. */
const tokenPattern = /^[A-Za-z0-9\-._~+/]+=*$/;

/**
 * The token, when it can go in an Authorization header: one pasted across
 * lines, or with a stray character, is refused here, naming where it came
 * from and where the character is, never the token itself (HTTP would
 * refuse the header, and its error quotes the whole value).
 */
function wellFormed(token: string, source: string): string {
  if (tokenPattern.test(token)) return token;
  const at = [...token].findIndex((c, i) => !/[A-Za-z0-9\-._~+/=]/.test(c) || (c === "=" && !/^=*$/.test(token.slice(i))));
  const c = [...token][at] ?? "";
  const what = /\s/.test(c) ? (c === "\n" || c === "\r" ? "a line break" : "a space") : `the character ${JSON.stringify(c)}`;
  throw new CliError(
    `${source} is not a bearer token: it holds ${what} at character ${at + 1}; a token is one line of letters, digits and -._~+/= (was it pasted across lines?).`,
    "TOKEN_MALFORMED",
    ExitCode.noAccess,
  );
}

/**
 * Settings from flags, then the environment (ENTITY_VERSIONS_URL,
 * ENTITY_VERSIONS_TOKEN), then the development defaults: the local service
 * and the token `npm start` left in ./data/dev-token (under DATA_DIR when
 * set), so that a developer
 * who ran `npm start` in this folder needs no configuration at all.
 */
export function resolveSettings(flags: SettingsFlags, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Settings {
  // Given but empty is a script's unset variable (--token "$DEPLOY_TOKEN"),
  // not "not given": falling back would act as another identity, or service.
  // A variable set to nothing (ENTITY_VERSIONS_TOKEN="$DEPLOY_TOKEN" in CI)
  // is the same mistake one step earlier.
  for (const [flag, value, read] of [["--url", flags.url, nonEmpty], ["--token", flags.token, bare]] as const) {
    if (value !== undefined && read(value) === undefined) {
      throw new CliError(`${flag} is empty: give its value, or leave the flag out (was the variable it came from unset?).`, "INVALID_ARGUMENT", ExitCode.usage);
    }
  }
  for (const [name, flag, read] of [["ENTITY_VERSIONS_URL", flags.url, nonEmpty], ["ENTITY_VERSIONS_TOKEN", flags.token, bare]] as const) {
    const value = env[name];
    if (flag === undefined && value !== undefined && read(value) === undefined) {
      throw new CliError(
        `${name} is set but empty: give it a value, or unset it (\`unset ${name}\`) to use the default (was the variable it came from unset?).`,
        "INVALID_ARGUMENT",
        ExitCode.usage,
      );
    }
  }
  const flagUrl = nonEmpty(flags.url);
  const envUrl = nonEmpty(env["ENTITY_VERSIONS_URL"]);
  const [rawUrl, urlSource] =
    flagUrl !== undefined ? [flagUrl, "--url"] : envUrl !== undefined ? [envUrl, "ENTITY_VERSIONS_URL"] : [defaultServiceUrl, "the default"];
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    // Quoted without what may be a password (CI logs keep what is printed).
    // Up to the last "@": a password may hold "/", "?" or "#" unencoded.
    const quoted = JSON.stringify(rawUrl.replace(/\/\/.*@/, "//…@"));
    throw new CliError(`${urlSource} is not a URL: ${quoted}; give the service's base URL, e.g. ${defaultServiceUrl}.`, "INVALID_ARGUMENT", ExitCode.usage);
  }
  if (url.username !== "" || url.password !== "") {
    // Never sent (fetch refuses such URLs) and never printed back: checked
    // before anything else quotes the URL.
    url.username = "";
    url.password = "";
    throw new CliError(
      `${urlSource} holds a user name or password: the CLI signs in with a token (--token, ENTITY_VERSIONS_TOKEN); give the URL without them, ${JSON.stringify(url.toString().replace(/\/+$/, ""))}.`,
      "INVALID_ARGUMENT",
      ExitCode.usage,
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new CliError(`${urlSource} must be an http or https URL, not ${JSON.stringify(rawUrl)}.`, "INVALID_ARGUMENT", ExitCode.usage);
  }
  if (/\/api\/?$/.test(url.pathname)) {
    // Every path the CLI calls starts with /api: this one would call /api/api/….
    throw new CliError(
      `${urlSource} is the service's root URL, without /api: ${JSON.stringify(`${url.origin}${url.pathname.replace(/\/api\/?$/, "")}`)}, not ${JSON.stringify(rawUrl)}.`,
      "INVALID_ARGUMENT",
      ExitCode.usage,
    );
  }
  const base = url.toString().replace(/\/+$/, "");

  const flagToken = bare(flags.token);
  if (flagToken !== undefined) return { url: base, urlSource, token: wellFormed(flagToken, "--token"), tokenSource: "--token" };
  const envToken = bare(env["ENTITY_VERSIONS_TOKEN"]);
  if (envToken !== undefined) return { url: base, urlSource, token: wellFormed(envToken, "ENTITY_VERSIONS_TOKEN"), tokenSource: "ENTITY_VERSIONS_TOKEN" };
  const fileSource = devTokenFile(env);
  const file = path.resolve(cwd, fileSource);
  let fileToken: string | undefined;
  try {
    fileToken = nonEmpty(fs.readFileSync(file, "utf8"));
  } catch {
    fileToken = undefined;
  }
  return fileToken === undefined
    ? { url: base, urlSource, token: undefined, tokenSource: undefined, devTokenFile: fileSource }
    : { url: base, urlSource, token: wellFormed(fileToken, fileSource), tokenSource: fileSource, devTokenFile: fileSource };
}

/** The token, or an error saying the three ways to give one (exit 4: no access without it). */
export function requireToken(settings: Settings): string {
  if (settings.token !== undefined) return settings.token;
  throw new CliError(
    `no token: pass --token, set ENTITY_VERSIONS_TOKEN, or run this where \`npm start\` wrote ${settings.devTokenFile ?? "./data/dev-token"} (with the DATA_DIR it was started with; mint one with \`npm run -s token -- --sub you --roles publisher\`).`,
    "NO_TOKEN",
    ExitCode.noAccess,
  );
}

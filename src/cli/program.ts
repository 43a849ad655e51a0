import fs from "node:fs";
import { Command, CommanderError, type Option } from "commander";
import { CliError, usageError } from "./cli-error.js";
import { registerAccessCommands } from "./commands/access.js";
import { registerActivate } from "./commands/activate.js";
import { registerDelete } from "./commands/delete.js";
import { registerDownload } from "./commands/download.js";
import { registerEvents } from "./commands/events.js";
import { registerGet } from "./commands/get.js";
import { registerList } from "./commands/list.js";
import { registerPush } from "./commands/push.js";
import { registerRollback } from "./commands/rollback.js";
import { registerWhoami } from "./commands/whoami.js";
import { ExitCode, exitCodeHelp } from "./exit-codes.js";

const packageVersion = (JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;

/** Points each command's usage errors at its own help (`entity-versions share add --help`), not a placeholder. */
function helpAfterErrors(command: Command, path: string): void {
  for (const sub of command.commands) {
    const name = `${path} ${sub.name()}`;
    sub.showHelpAfterError(`(see "${name} --help" for the command's options and an example)`);
    helpAfterErrors(sub, name);
  }
}

/**
 * Checks required options after unknown ones: commander reports a
 * required option missing before an unknown option, so a misspelled
 * `--entitiy my-app` was told "--entity not specified", never the typo
 * and its suggestion. The options stay required, checked just before the
 * action, with commander's own message.
 */
function requiredAfterUnknown(program: Command): void {
  const required = new Map<Command, Option[]>();
  const walk = (command: Command) => {
    const mandatory = command.options.filter((option) => option.mandatory);
    for (const option of mandatory) option.makeOptionMandatory(false);
    if (mandatory.length > 0) required.set(command, mandatory);
    command.commands.forEach(walk);
  };
  walk(program);
  program.hook("preAction", (_program, action) => {
    for (const option of required.get(action) ?? []) {
      if (action.getOptionValue(option.attributeName()) === undefined) {
        action.error(`error: required option '${option.flags}' not specified`, { code: "commander.missingMandatoryOptionValue" });
      }
    }
  });
}

/**
 * The whole command tree; commander parses, prints help and reports usage
 * errors, to `errors` when given (--json, which prints them as JSON).
 */
export function buildProgram(errors?: (text: string) => void): Command {
  const program = new Command("entity-versions")
    .description("Publish, download and manage the versions of an entity through the entity-versions REST API.")
    .version(packageVersion, "-V, --version", "print the CLI's version")
    // Options belong to the command they follow, so `push --version` is push's option, not the CLI's version.
    .enablePositionalOptions()
    .exitOverride()
    .showSuggestionAfterError()
    // A usage error says where the command's options and example are.
    .showHelpAfterError('(see "entity-versions --help" for the commands, and "entity-versions <command> --help" for one\'s options and an example)')
    .addHelpText(
      "after",
      `
Settings: --url and --token on every command (before or after its name), else ENTITY_VERSIONS_URL and ENTITY_VERSIONS_TOKEN, else
http://localhost:8080 and ./data/dev-token (what \`npm start\` writes; $DATA_DIR/dev-token when DATA_DIR is set) when present.

${exitCodeHelp}

Example:
  $ entity-versions push ./my-app --entity my-app --activate`,
    );
  // Set before the commands are added: they inherit it.
  if (errors !== undefined) program.configureOutput({ writeErr: errors, outputError: errors });
  registerPush(program);
  registerDownload(program);
  registerList(program);
  registerGet(program);
  registerActivate(program);
  registerRollback(program);
  registerDelete(program);
  registerEvents(program);
  registerAccessCommands(program);
  registerWhoami(program);
  helpAfterErrors(program, "entity-versions");
  requiredAfterUnknown(program);
  return program;
}

/** Whether --json was asked for, read from the raw arguments (an error can come before commander has parsed them). */
function wantsJson(argv: readonly string[]): boolean {
  return argv.includes("--json");
}

/** Prints an error the way the CLI always does: `error: <message> (<CODE>)` and its hints, or the JSON body with --json. */
function report(error: CliError, json: boolean): void {
  if (json) {
    process.stderr.write(`${JSON.stringify(error.body)}\n`);
    return;
  }
  process.stderr.write(`error: ${error.message} (${error.code})\n${error.hints.map((d) => `  ${d}\n`).join("")}`);
}

/**
 * The options every command takes, given before the command's name
 * (`entity-versions --url X list app`, as many CLIs allow), moved to the
 * end, where the command reads them: they are declared per command (see
 * withCommonOptions), so before it they would be unknown to the program.
 */
export function commonOptionsLast(argv: readonly string[]): string[] {
  const leading: string[][] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--json" || /^--(?:url|token)=/.test(arg)) leading.push([arg]);
    else if ((arg === "--url" || arg === "--token") && i + 1 < argv.length) leading.push([arg, argv[++i]!]);
    else break;
  }
  if (leading.length === 0) return [...argv];
  const rest = argv.slice(i);
  // Given again after the command: that one is the later, and wins, as a repeated option does.
  const nameOf = (arg: string) => arg.split("=", 1)[0]!;
  const later = new Set(rest.filter((arg) => arg.startsWith("--")).map(nameOf));
  const moved = leading.filter(([arg]) => !later.has(nameOf(arg!))).flat();
  const end = rest.indexOf("--");
  return end < 0 ? [...rest, ...moved] : [...rest.slice(0, end), ...moved, ...rest.slice(end)];
}

/** Runs the CLI on `argv` (the user's arguments) and resolves with the exit code. */
export async function run(userArgv: readonly string[]): Promise<number> {
  const argv = commonOptionsLast(userArgv);
  const json = wantsJson(argv);
  // With --json, commander's usage errors are kept to be printed as the one JSON document.
  let usageText = "";
  try {
    await buildProgram(json ? (text) => void (usageText += text) : undefined).parseAsync([...argv], { from: "user" });
    return ExitCode.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // commander has printed its message (or the help, or the version) already, unless kept for --json.
      // `help <command>` is commander.help, with its own exit code: 0 there, 1 for a group shown for want of a subcommand.
      if (error.code === "commander.helpDisplayed" || error.code === "commander.version" || (error.code === "commander.help" && error.exitCode === 0)) return ExitCode.ok;
      if (json) report(usageError(usageText.trim().replace(/^error: /, "").replace(/\s*\n\s*/g, " ")), true);
      return ExitCode.usage;
    }
    if (error instanceof CliError) {
      report(error, json);
      return error.exitCode;
    }
    const system = error as NodeJS.ErrnoException;
    if (error instanceof Error && typeof system.code === "string" && typeof system.syscall === "string") {
      // A file that cannot be read or written (permissions, a full disk, a missing folder): the system says what and where.
      report(new CliError(error.message, system.code), json);
      return ExitCode.failure;
    }
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    // --json promises a JSON error body on stderr, whatever failed.
    if (json) report(new CliError(`${error instanceof Error ? error.message : String(error)}: this is a bug in the CLI; please report it with the command you ran`, "INTERNAL"), true);
    else process.stderr.write(`error: ${message} (INTERNAL)\nThis is a bug in the CLI; please report it with the command you ran.\n`);
    return ExitCode.failure;
  }
}


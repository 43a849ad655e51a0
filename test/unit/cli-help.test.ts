// Every command of the CLI has --help with an example (commander, in
// process: the end-to-end suite runs the binary for the top-level help).
import type { Command } from "commander";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { buildProgram, commonOptionsLast } from "../../src/cli/program.js";

/** Every command that does something (those with subcommands only group them). */
function leaves(command: Command, prefix: string[] = []): { path: string; command: Command }[] {
  return command.commands.flatMap((c) => {
    const path = [...prefix, c.name()];
    return c.commands.length === 0 ? [{ path: path.join(" "), command: c }] : leaves(c, path);
  });
}

test("every command's help has a description, an example and the common options", () => {
  const commands = leaves(buildProgram());
  assert.equal(
    commands.map((c) => c.path),
    ["push", "download", "list", "get", "activate", "rollback", "delete", "events", "watch", "access", "publisher add", "publisher remove", "share add", "share remove", "store add", "store remove", "whoami"],
  );
  for (const { path, command } of commands) {
    let help = "";
    command.configureOutput({ writeOut: (s) => (help += s) });
    command.outputHelp();
    assert.ok(command.description().length > 20, `${path} has a description`);
    assert.match(help, new RegExp(`Examples?:\\n\\s+\\$ entity-versions ${path.split(" ")[0]}\\b`), `${path} has an example`);
    for (const option of ["--url <url>", "--token <jwt>", "--json"]) assert.ok(help.includes(option), `${path} takes ${option}`);
  }
});

test("a command that groups others shows examples of them too", () => {
  for (const group of buildProgram().commands.filter((c) => c.commands.length > 0)) {
    let help = "";
    group.configureOutput({ writeOut: (text) => (help += text) });
    group.outputHelp();
    assert.match(help, new RegExp(`Examples?:\\n\\s+\\$ entity-versions ${group.name()} \\w+`), `${group.name()} has an example`);
  }
});

test("the top-level help has the exit-code table", () => {
  const program = buildProgram();
  let help = "";
  program.configureOutput({ writeOut: (s) => (help += s) });
  program.outputHelp();
  for (const line of ["0  success", "1  failure", "2  usage", "3  the entity changed since you read it", "4  not found or no access"]) assert.ok(help.includes(line), line);
});

/** The usage error commander reports for these arguments (nothing is called: each fails before its action). */
async function usageErrorOf(argv: string[]): Promise<string> {
  let err = "";
  try {
    await buildProgram((text) => (err += text)).parseAsync(argv, { from: "user" });
  } catch {
    // exitOverride: the error is thrown after it is written.
  }
  return err;
}

test("a misspelled required option is reported as unknown, with a suggestion, not as the required one missing", async () => {
  const typo = await usageErrorOf(["push", "./x", "--entitiy", "my-app"]);
  assert.match(typo, "unknown option '--entitiy'");
  assert.match(typo, "Did you mean --entity?");
  assert.match(await usageErrorOf(["push", "./x"]), "required option '--entity <id>' not specified", "still required");
  assert.match(await usageErrorOf(["download", "my-app"]), "required option '-o, --output <file>' not specified");
});

test("--url, --token and --json before the command are moved after it, where the command reads them", () => {
  assert.equal(commonOptionsLast(["--url", "http://x", "--json", "list", "app"]), ["list", "app", "--url", "http://x", "--json"]);
  assert.equal(commonOptionsLast(["--token=t", "share", "add", "app", "bob", "--", "-x"]), ["share", "add", "app", "bob", "--token=t", "--", "-x"]);
  assert.equal(commonOptionsLast(["list", "app", "--url", "http://x"]), ["list", "app", "--url", "http://x"], "after the command: as it was");
  assert.equal(commonOptionsLast(["--help"]), ["--help"]);
  assert.equal(commonOptionsLast(["--url", "http://a", "list", "app", "--url=http://b"]), ["list", "app", "--url=http://b"], "the later one wins");
});

test.run();

import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parsePrincipalId } from "../arguments.js";
import { usageError } from "../cli-error.js";
import { type CommonOptions, contextOf, withCommonOptions } from "../command-context.js";
import type { RestEntityAccess } from "../rest-types.js";

// Who may read and publish an entity (EntityAccessService): `access` shows
// it, `publisher`, `share` and `store` change it. Every change answers the
// access afterwards, which is what is printed.

function formatAccess(a: RestEntityAccess): string {
  const list = (items: string[]) => (items.length === 0 ? "(none)" : items.join(", "));
  return [
    `entity:      ${a.entity_id}`,
    `publishers:  ${list(a.publishers)}`,
    `shared with: ${list(a.shares)}`,
    `org stores:  ${list(a.org_stores)}`,
    `public:      ${a.public_store ? "yes, in the public store" : "no"}`,
  ].join("\n");
}

async function callAccess(options: CommonOptions, method: string, path: string, body?: unknown): Promise<void> {
  const { output, api } = contextOf(options);
  const access = (await api().call<RestEntityAccess>(method, path, body)).body;
  output.result(access, () => formatAccess(access));
}

const userArgument = (cmd: Command) => cmd.argument("<entity>", "the entity", parseEntityId).argument("<user>", "the user id (a token's sub)", parsePrincipalId);

interface StoreOptions extends CommonOptions {
  org?: string;
  public?: boolean;
}

/** The store route an `--org ORG` or `--public` option names. */
function storePath(entity: string, options: StoreOptions): string {
  if ((options.org === undefined) === (options.public !== true)) throw usageError("give exactly one of --org ORG and --public.");
  return options.org !== undefined ? apiPath("entities", entity, "stores", "orgs", options.org) : apiPath("entities", entity, "stores", "public");
}

/** Registers access, publisher add|remove, share add|remove and store add|remove. */
export function registerAccessCommands(program: Command): void {
  withCommonOptions(
    program.command("access")
      .summary("show who may read and publish an entity")
      .description("Shows an entity's publishers, the users it is shared with, and the organization and public stores it is in.")
      .argument("<entity>", "the entity", parseEntityId)
      .addHelpText("after", "\nExample:\n  $ entity-versions access my-app")
      .action((entity: string, options: CommonOptions) => callAccess(options, "GET", apiPath("entities", entity, "access"))),
  );

  const publisher = program
    .command("publisher")
    .summary("add or remove an entity's publishers")
    .description("Publishers may push, activate and delete versions and change access (with the publisher role in their token).")
    .addHelpText("after", "\nExamples:\n  $ entity-versions publisher add my-app alice\n  $ entity-versions publisher remove my-app alice");
  withCommonOptions(
    userArgument(publisher.command("add"))
      .description("Makes a user a publisher of the entity.")
      .addHelpText("after", "\nExample:\n  $ entity-versions publisher add my-app alice")
      .action((entity: string, user: string, options: CommonOptions) =>
        callAccess(options, "POST", apiPath("entities", entity, "publishers"), { user_id: user }),
      ),
  );
  withCommonOptions(
    userArgument(publisher.command("remove").alias("rm"))
      .description("Removes a publisher of the entity (not the last one).")
      .addHelpText("after", "\nExample:\n  $ entity-versions publisher remove my-app alice")
      .action((entity: string, user: string, options: CommonOptions) =>
        callAccess(options, "DELETE", apiPath("entities", entity, "publishers", user)),
      ),
  );

  const share = program
    .command("share")
    .summary("share an entity with users, or stop")
    .description("Users an entity is shared with may read and download its versions.")
    .addHelpText("after", "\nExamples:\n  $ entity-versions share add my-app bob\n  $ entity-versions share remove my-app bob");
  withCommonOptions(
    userArgument(share.command("add"))
      .description("Shares the entity with a user.")
      .addHelpText("after", "\nExample:\n  $ entity-versions share add my-app bob")
      .action((entity: string, user: string, options: CommonOptions) => callAccess(options, "POST", apiPath("entities", entity, "shares"), { user_id: user })),
  );
  withCommonOptions(
    userArgument(share.command("remove").alias("rm"))
      .description("Stops sharing the entity with a user.")
      .addHelpText("after", "\nExample:\n  $ entity-versions share remove my-app bob")
      .action((entity: string, user: string, options: CommonOptions) => callAccess(options, "DELETE", apiPath("entities", entity, "shares", user))),
  );

  const store = program
    .command("store")
    .summary("publish an entity to an organization's store or the public store, or withdraw it")
    .description("Members of an organization read the entities in its store; every authenticated user reads those in the public store.")
    .addHelpText("after", "\nExamples:\n  $ entity-versions store add my-app --org acme\n  $ entity-versions store remove my-app --public");
  withCommonOptions(
    store.command("add")
      .description("Publishes the entity to an organization's store (--org) or to the public store (--public).")
      .argument("<entity>", "the entity", parseEntityId)
      .option("--org <org>", "the organization id (a token's orgs)", parsePrincipalId)
      .option("--public", "the public store")
      .addHelpText("after", "\nExamples:\n  $ entity-versions store add my-app --org acme\n  $ entity-versions store add my-app --public")
      .action((entity: string, options: StoreOptions) => callAccess(options, "PUT", storePath(entity, options))),
  );
  withCommonOptions(
    store.command("remove").alias("rm")
      .description("Withdraws the entity from an organization's store (--org) or from the public store (--public).")
      .argument("<entity>", "the entity", parseEntityId)
      .option("--org <org>", "the organization id", parsePrincipalId)
      .option("--public", "the public store")
      .addHelpText("after", "\nExample:\n  $ entity-versions store remove my-app --org acme")
      .action((entity: string, options: StoreOptions) => callAccess(options, "DELETE", storePath(entity, options))),
  );
}

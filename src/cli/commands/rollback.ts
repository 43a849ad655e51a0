import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId } from "../arguments.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { describeVersion } from "../output.js";
import type { RestVersion } from "../rest-types.js";
import { previousByCreation, type RollbackStrategy } from "../rollback-target.js";

/** How rollback picks its target; one place to change when the service records activations. */
const chooseTarget: RollbackStrategy = previousByCreation;

async function rollback(entity: string, options: CommonOptions): Promise<void> {
  const { output, api: makeApi } = contextOf(options);
  const api = makeApi();
  const choice = await chooseTarget(api, entity);
  const version = (await api.call<RestVersion>("PUT", apiPath("entities", entity, "active-version"), { version_id: choice.target.id })).body;
  output.result(version, () =>
    [`${entity}: rolled back to ${describeVersion(version)}; ${describeVersion(choice.active)} was active.`, `Chosen as ${choice.reason}.`].join("\n"),
  );
}

/** `rollback`: activates the version before the active one. */
export function registerRollback(program: Command): void {
  withCommonOptions(
    program.command("rollback")
      .summary("activate the version created before the active one")
      .description(
        prose(`Activates the version created just before the active one, and says which it chose and why. The service
keeps no history of activations yet, so "the version that was active before" cannot be known; rollback goes
by creation order. To go to any other version, use activate.`),
      )
      .argument("<entity>", "the entity", parseEntityId)
      .addHelpText("after", "\nExample:\n  $ entity-versions rollback my-app")
      .action((entity: string, options: CommonOptions) => rollback(entity, options)),
  );
}

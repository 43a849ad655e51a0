import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId } from "../arguments.js";
import { CliError, ServiceError } from "../cli-error.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { describeVersion } from "../output.js";
import type { RestVersion } from "../rest-types.js";
import { previouslyActive, type RollbackStrategy } from "../rollback-target.js";

/** How rollback picks its target. */
const chooseTarget: RollbackStrategy = previouslyActive;

async function rollback(entity: string, options: CommonOptions): Promise<void> {
  const { output, api: makeApi } = contextOf(options);
  const api = makeApi();
  const choice = await chooseTarget(api, entity);
  // Only if nobody activated another version meanwhile (ACTIVE_VERSION_CHANGED otherwise).
  let version: RestVersion;
  try {
    version = (
      await api.call<RestVersion>("PUT", apiPath("entities", entity, "active-version"), {
        version_id: choice.target.id,
        expected_active_version_id: choice.active.id,
      })
    ).body;
  } catch (error) {
    if (error instanceof ServiceError && error.code === "ACTIVE_VERSION_CHANGED") {
      // The shared hint names activate's --expect-active, which rollback has not.
      const hint = `another deployer activated a version meanwhile: \`entity-versions list ${entity}\` marks it (*); run rollback again to roll back from it, or \`entity-versions activate ${entity} VERSION_ID --expect-active ID\` to choose.`;
      throw new CliError(error.message, error.code, error.exitCode, error.body, [hint]);
    }
    throw error;
  }
  output.result(version, () =>
    [`${entity}: rolled back to ${describeVersion(version)}; ${describeVersion(choice.active)} was active.`, `Chosen as ${choice.reason}.`].join("\n"),
  );
}

/** `rollback`: activates the version that was active before the active one. */
export function registerRollback(program: Command): void {
  withCommonOptions(
    program.command("rollback")
      .summary("activate the version that was active before")
      .description(
        prose(`Activates the version that was active before the active one, read from the entity's events, and says
which it chose and why. When none was active before, or that version has been deleted, it activates the version
created just before the active one, and says so. It activates only if the active version is still the one it
read (another deployer's activation meanwhile makes it fail with ACTIVE_VERSION_CHANGED). To go to any other
version, use activate.`),
      )
      .argument("<entity>", "the entity", parseEntityId)
      .addHelpText("after", "\nExample:\n  $ entity-versions rollback my-app")
      .action((entity: string, options: CommonOptions) => rollback(entity, options)),
  );
}

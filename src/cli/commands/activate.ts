import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId } from "../arguments.js";
import { type CommonOptions, contextOf, withCommonOptions } from "../command-context.js";
import { describeVersion } from "../output.js";
import type { RestVersion } from "../rest-types.js";

async function activate(entity: string, versionId: string, options: CommonOptions): Promise<void> {
  const { output, api } = contextOf(options);
  const version = (await api().call<RestVersion>("PUT", apiPath("entities", entity, "active-version"), { version_id: versionId })).body;
  output.result(version, () => `${entity}: ${describeVersion(version)} is now the active version.`);
}

/** `activate`: sets the active version. */
export function registerActivate(program: Command): void {
  withCommonOptions(
    program.command("activate")
      .summary("make a version the active one")
      .description("Makes a version the entity's active version: the one installed and deployed by default.")
      .argument("<entity>", "the entity", parseEntityId)
      .argument("<version-id>", "the version's id (see list)", parseVersionId)
      .addHelpText("after", "\nExample:\n  $ entity-versions activate my-app 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10")
      .action((entity: string, versionId: string, options: CommonOptions) => activate(entity, versionId, options)),
  );
}

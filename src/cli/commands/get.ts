import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId } from "../arguments.js";
import { type CommonOptions, contextOf, withCommonOptions } from "../command-context.js";
import { formatVersionDetails } from "../output.js";
import type { RestVersion } from "../rest-types.js";

async function get(entity: string, versionId: string, options: CommonOptions): Promise<void> {
  const { output, api } = contextOf(options);
  const version = (await api().call<RestVersion>("GET", apiPath("entities", entity, "versions", versionId))).body;
  output.result(version, () => formatVersionDetails(version));
}

/** `get`: one version's fields. */
export function registerGet(program: Command): void {
  withCommonOptions(
    program.command("get")
      .summary("show one version")
      .description("Shows one version of an entity: its version string, who published it and when, size, hashes, base.")
      .argument("<entity>", "the entity", parseEntityId)
      .argument("<version-id>", "the version's id (see list)", parseVersionId)
      .addHelpText("after", "\nExample:\n  $ entity-versions get my-app 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10")
      .action((entity: string, versionId: string, options: CommonOptions) => get(entity, versionId, options)),
  );
}

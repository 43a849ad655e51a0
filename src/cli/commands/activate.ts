import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId } from "../arguments.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { describeVersion } from "../output.js";
import type { RestVersion } from "../rest-types.js";

interface ActivateOptions extends CommonOptions {
  expectActive?: string;
}

async function activate(entity: string, versionId: string, options: ActivateOptions): Promise<void> {
  const { output, api } = contextOf(options);
  const body = { version_id: versionId, ...(options.expectActive === undefined ? {} : { expected_active_version_id: options.expectActive }) };
  const version = (await api().call<RestVersion>("PUT", apiPath("entities", entity, "active-version"), body)).body;
  output.result(version, () => `${entity}: ${describeVersion(version)} is now the active version.`);
}

/** `activate`: sets the active version, optionally only if it is still the one the caller last saw. */
export function registerActivate(program: Command): void {
  withCommonOptions(
    program.command("activate")
      .summary("make a version the active one")
      .description(
        prose(`Makes a version the entity's active version: the one installed and deployed by default. With
--expect-active, only if the active version is still the one given: when another deployer activated
something else meanwhile, nothing changes and the command exits 3 (ACTIVE_VERSION_CHANGED), naming the
version now active. --expect-active "" activates only if no version is active yet.`),
      )
      .argument("<entity>", "the entity", parseEntityId)
      .argument("<version-id>", "the version's id (see list)", parseVersionId)
      .option(
        "--expect-active <version-id>",
        'only if this version is still the active one (compare-and-set); "" for only if none is',
        (value: string) => (value === "" ? "" : parseVersionId(value)),
      )
      .addHelpText(
        "after",
        "\nExamples:\n  $ entity-versions activate my-app 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10\n  $ entity-versions activate my-app 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10 --expect-active 7f3c9a1e-5b2d-4e8f-a6c0-1d9b3e7f2a45",
      )
      .action((entity: string, versionId: string, options: ActivateOptions) => activate(entity, versionId, options)),
  );
}

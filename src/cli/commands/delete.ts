import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId } from "../arguments.js";
import { type CommonOptions, contextOf, withCommonOptions } from "../command-context.js";

async function remove(entity: string, versionId: string, options: CommonOptions): Promise<void> {
  const { output, api } = contextOf(options);
  // Not retried: after a lost answer, a second DELETE would report VERSION_NOT_FOUND for a delete that worked.
  const answer = (await api().call<Record<string, never>>("DELETE", apiPath("entities", entity, "versions", versionId), undefined, { attempts: 1 })).body;
  output.result(answer, () => `${entity}: deleted version ${versionId} and its package.`);
}

/** `delete`: removes a version that is not active. */
export function registerDelete(program: Command): void {
  withCommonOptions(
    program.command("delete")
      .summary("delete a version that is not active")
      .description("Deletes a version's record and its package. The active version cannot be deleted: activate another first.")
      .argument("<entity>", "the entity", parseEntityId)
      .argument("<version-id>", "the version's id (see list)", parseVersionId)
      .addHelpText("after", "\nExample:\n  $ entity-versions delete my-app 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10")
      .action((entity: string, versionId: string, options: CommonOptions) => remove(entity, versionId, options)),
  );
}

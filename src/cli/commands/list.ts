import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId } from "../arguments.js";
import { type CommonOptions, contextOf, listPage, type PageOptions, withCommonOptions, withNextPage, withPageOptions } from "../command-context.js";
import { formatBytes, formatTable } from "../output.js";
import type { RestVersionList } from "../rest-types.js";

type ListOptions = CommonOptions & PageOptions;

async function list(entity: string, options: ListOptions): Promise<void> {
  const { output, settings, api } = contextOf(options);
  const page = await listPage<RestVersionList>(api(), apiPath("entities", entity, "versions"), options);
  output.result(page, () => {
    if (page.versions.length === 0) return `${entity} has no versions.`;
    const table = formatTable(
      ["version", "id", "active", "published by", "created at", "size"],
      page.versions.map((v) => [v.version, v.id, v.is_active ? "*" : "", v.published_by, v.created_at, formatBytes(Number(v.file_size_bytes))]),
    );
    return withNextPage(table, page.next_page_token, `list ${entity}`, options, settings);
  });
}

/** `list`: one page of an entity's versions, newest first, as a table. */
export function registerList(program: Command): void {
  withCommonOptions(
    withPageOptions(program.command("list"), "versions")
      .summary("list an entity's versions, newest first")
      .description("Lists an entity's versions, newest first, one page at a time (the active one is marked *).")
      .argument("<entity>", "the entity", parseEntityId)
      .addHelpText("after", "\nExamples:\n  $ entity-versions list my-app\n  $ entity-versions list my-app --limit 5 --json")
      .action((entity: string, options: ListOptions) => list(entity, options)),
  );
}

import * as os from "node:os";
import * as path from "node:path";
import { CliError, type ServiceError } from "./cli-error.js";
import { repeatedSettings, shellWord } from "./command-context.js";
import { ExitCode } from "./exit-codes.js";
import type { Settings } from "./settings.js";
import type { RestVersionRef } from "./rest-types.js";

/**
 * Turns the service's STALE_BASE into what a person needs to reconcile:
 * who published the tip, when and its id, what this push built on and where
 * that came from, and the commands that get the tip and push on top of it.
 * Exit 3; with --json the service's error body is printed as it came.
 */
export function staleBaseError(
  error: ServiceError,
  push: {
    entity: string;
    target: string;
    base: string | undefined;
    baseFrom: string | undefined;
    elsewhere?: ReadonlyArray<{ service: string; base: { version_id: string } }>;
    /** The push's own flags to repeat in the push it prints (`--activate`, `--version …`, `--force`, `--json`). */
    repeat?: string;
  },
  settings: Settings,
): CliError {
  const { entity, target, base, baseFrom, elsewhere = [], repeat = "" } = push;
  const { flags, note } = repeatedSettings(settings);
  const tip = error.body["latest_version"] as RestVersionRef | null | undefined;
  const hints: string[] = [];
  if (tip !== null && tip !== undefined) {
    hints.push(`the tip of ${entity} is ${tip.version} (id ${tip.id}), published by ${tip.published_by} at ${tip.created_at}.`);
  } else {
    hints.push(`${entity} has no versions (they were deleted): a push on it is a first push, with no base; delete this folder's .entity-versions.json (or its entry for ${entity}) and push again.`);
  }
  hints.push(
    base === undefined
      ? "this push named no base: this folder has no record of what it builds on (.entity-versions.json)."
      : `this push built on ${base} (from ${baseFrom ?? "--base"}).`,
  );
  if (base === undefined) {
    for (const other of elsewhere) {
      hints.push(`it records ${other.base.version_id} as the base for ${other.service}: if that is this service under another name, pass --base ${other.base.version_id} (or use that URL).`);
    }
  }
  if (tip !== null && tip !== undefined) {
    hints.push(
      "to reconcile, get the tip, merge its changes into your tree, then push on top of it:",
      // Outside the pushed tree, wherever the command runs: a package
      // written into it would be packed into the next push.
      `  entity-versions download ${entity} --version-id ${tip.id} -o ${shellWord(path.join(os.tmpdir(), `${entity}-${tip.version}.tgz`))}${flags}`,
      `  entity-versions push ${shellWord(target)} --entity ${entity} --base ${tip.id}${repeat}${flags}`,
      ...(note === "" ? [] : [`  ${note}`]),
    );
  }
  return new CliError(error.message, "STALE_BASE", ExitCode.conflict, error.body, hints);
}

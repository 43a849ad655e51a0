import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { Command } from "commander";
import { packageJson } from "../../api/validate.js";
import { type ApiClient, apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId, parseVersionString } from "../arguments.js";
import { CliError, ServiceError } from "../cli-error.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { removeOnInterrupt } from "../interrupt.js";
import { staleBaseError } from "../stale-base.js";
import { summariseToken } from "../token-claims.js";
import { describeVersion, displayPath, formatBytes, type Output } from "../output.js";
import { copyHashedFile, packTree } from "../pack.js";
import { type PushSource, readPushSource } from "../push-source.js";
import type { RestConfirmAnswer, RestUploadUrlAnswer, RestVersion, RestVersionList } from "../rest-types.js";
import { basesElsewhere, readBase, type RecordedBase, stateFileName, tryRecordBase } from "../state-file.js";
import { secondAfter, versionStringAt } from "../version-clock.js";

interface PushOptions extends CommonOptions {
  entity: string;
  version?: string;
  activate?: boolean;
  force?: boolean;
  base?: string;
}

/** How many seconds a default version moves on when its second is taken (each try is one upload-url call). */
const maxVersionBumps = 10;
/** Confirm is idempotent: a lost answer is retried, and a retry returns the version the first attempt made. */
const confirmAttempts = 4;

/** The base a push builds on, and where it came from (said when the service finds it stale). */
interface Base {
  readonly id: string | undefined;
  readonly from: string | undefined;
}

function resolveBase(flag: string | undefined, stateDir: string, service: string, entity: string): Base {
  if (flag !== undefined) return { id: flag, from: "--base" };
  const recorded = readBase(stateDir, service, entity);
  return recorded === undefined ? { id: undefined, from: undefined } : { id: recorded.version_id, from: displayPath(path.join(stateDir, stateFileName)) };
}

/**
 * The package to upload, in a scratch folder: packed from a directory, or
 * a copy of the file, checked on the way against the hash the push
 * declared. Uploaded from the file itself, a file written to during the
 * push went up other than its source hash says, a version no download
 * would ever pass.
 */
async function packageOf(source: PushSource, scratch: string): Promise<{ file: string; sizeBytes: number; md5Base64: string }> {
  if (source.kind === "file") {
    const file = path.join(scratch, "package");
    const name = displayPath(source.file);
    return { file, ...(await copyHashedFile({ path: name, absolute: source.file, executable: false, size: source.sizeBytes, sha256: source.sourceHash }, file)) };
  }
  const file = path.join(scratch, "package.tgz");
  return { file, ...(await packTree(source.files, file)) };
}

/** Asks for upload URLs, moving a default version on by a second while that second is taken. */
async function requestUpload(
  api: ApiClient,
  entity: string,
  body: { version: string; source_hash: string; base_version_id?: string; force?: boolean },
  versionIsDefault: boolean,
): Promise<{ answer: RestUploadUrlAnswer; version: string }> {
  let version = body.version;
  for (let bump = 0; ; bump++) {
    try {
      const res = await api.call<RestUploadUrlAnswer>("POST", apiPath("entities", entity, "versions", "upload-url"), { ...body, version });
      return { answer: res.body, version };
    } catch (error) {
      if (!(error instanceof ServiceError && error.code === "VERSION_ALREADY_EXISTS" && versionIsDefault && bump < maxVersionBumps)) throw error;
      version = secondAfter(version);
    }
  }
}

/** Uploads the package (and the lockfile) to the URLs upload-url issued, then confirms; the confirm answer and whether it took a retry. */
async function uploadAndConfirm(
  api: ApiClient,
  output: Output,
  entity: string,
  source: PushSource,
  answer: RestUploadUrlAnswer & { upload_url: string; storage_path: string },
  confirm: { version: string; base_version_id?: string; set_as_active: boolean; force?: boolean },
): Promise<{ confirmed: RestConfirmAnswer; retried: boolean }> {
  // Loaded here: the Azure SDK is most of the CLI's start-up time, and only push and download need it.
  const { uploadFile } = await import("../blob-transfer.js");
  const scratch = await fs.mkdtemp(path.join(os.tmpdir(), "entity-versions-"));
  const forget = removeOnInterrupt(scratch);
  try {
    // The signed URL would take any size; confirm would refuse it only after
    // the upload. A file's size is known before it is copied.
    const maxBytes = answer.max_file_size_bytes === undefined ? undefined : Number(answer.max_file_size_bytes);
    const refuseIfTooLarge = (sizeBytes: number) => {
      if (maxBytes === undefined || sizeBytes <= maxBytes) return;
      throw new CliError(
        `the package is ${formatBytes(sizeBytes)} (${sizeBytes} bytes), more than the ${formatBytes(maxBytes)} (${maxBytes} bytes) the service accepts; nothing was uploaded.`,
        "PACKAGE_TOO_LARGE",
        undefined,
        undefined,
        [
          source.kind === "directory"
            ? "leave build output and other large files out of the package with an .entityversionsignore file in the folder (same syntax as .gitignore)"
            : "push a smaller package file",
          "the service's limit is its MAX_PACKAGE_BYTES setting",
        ],
      );
    };
    if (source.kind === "file") refuseIfTooLarge(source.sizeBytes);
    const pkg = await packageOf(source, scratch);
    refuseIfTooLarge(pkg.sizeBytes);
    const manifest = source.kind === "directory" ? source.packageJson : undefined;
    if (manifest !== undefined && answer.max_package_json_bytes !== undefined && answer.max_package_json_values !== undefined) {
      // Checked by the service's own rule, against its limits, before the upload that confirm would waste.
      try {
        packageJson(manifest as JsonObject, { maxPackageJsonBytes: Number(answer.max_package_json_bytes), maxPackageJsonValues: Number(answer.max_package_json_values) });
      } catch (error) {
        throw new CliError(`package.json ${error instanceof ConnectError ? error.rawMessage.replace(/^Invalid package_json: /, "") : String(error)}; nothing was uploaded.`, "INVALID_PACKAGE_JSON", undefined, undefined, [
          "the service stores the root package.json as the version's manifest: make it smaller, or list it in .entityversionsignore (it is then left out of the package too)",
          "the service's limits are its MAX_PACKAGE_JSON_BYTES and MAX_PACKAGE_JSON_VALUES settings",
        ]);
      }
    }
    output.note(`Uploading the package (${formatBytes(pkg.sizeBytes)})`);
    await uploadFile(answer.upload_url, pkg.file, pkg.sizeBytes, pkg.md5Base64, "package", output.json);
    let lockPath: string | undefined;
    const lockfile = source.kind === "directory" ? source.lockfile : undefined;
    if (lockfile !== undefined && answer.lockfile_upload_url !== undefined && answer.package_lock_path !== undefined) {
      const copy = path.join(scratch, "package-lock.json");
      const { sizeBytes, md5Base64 } = await copyHashedFile(lockfile, copy);
      output.note(`Uploading package-lock.json (${formatBytes(sizeBytes)})`);
      await uploadFile(answer.lockfile_upload_url, copy, sizeBytes, md5Base64, "lockfile", output.json);
      lockPath = answer.package_lock_path;
    }
    const body = {
      ...confirm,
      storage_path: answer.storage_path,
      source_hash: source.sourceHash,
      file_size_bytes: pkg.sizeBytes,
      ...(source.kind === "directory" && source.packageJson !== undefined ? { package_json: source.packageJson } : {}),
      ...(lockPath === undefined ? {} : { package_lock_path: lockPath }),
    };
    // Retrying a confirm is always safe: the service answers a confirm of
    // an upload that already produced a version with that version.
    const res = await api.call<RestConfirmAnswer>("POST", apiPath("entities", entity, "versions", "confirm"), body, {
      attempts: confirmAttempts,
      retryRefused: true,
    });
    return { confirmed: res.body, retried: res.attempts > 1 };
  } finally {
    await fs.rm(scratch, { recursive: true, force: true });
    forget();
  }
}

/** Records a pushed version as the folder's base, warning (not failing: the push is done) when it cannot. */
function recordPushed(output: Output, stateDir: string, service: string, entity: string, v: RestVersion): RecordedBase {
  const recorded = tryRecordBase(stateDir, service, entity, { version_id: v.id, version: v.version, source_hash: v.source_hash, via: "push", recorded_at: new Date().toISOString() });
  if (recorded.problem !== undefined) {
    output.warn(`${v.id} could not be recorded as the base of the next push (${recorded.problem}); pass --base ${v.id} to the next push from here.`);
  }
  return recorded;
}

/** The closing line of a push: where its base was recorded, when it was. */
function nextPushLine(recorded: RecordedBase): string[] {
  return recorded.problem === undefined ? [`The next push from here builds on it (recorded in ${displayPath(recorded.file)}).`] : [];
}

/**
 * Records the version a push answered as the folder's base, and returns the
 * closing line that says so. A version already published that is neither
 * the push's base nor the tip is source reverted to an older version's:
 * the folder knew the versions since, and its next push builds on what it
 * knew, so its base does not move back; a folder that knew none records
 * no base rather than one its next push would be refused on.
 */
async function settleBase(api: ApiClient, output: Output, push: { stateDir: string; service: string; entity: string; base: Base }, v: RestVersion, created: boolean): Promise<string[]> {
  const { stateDir, service, entity, base } = push;
  if (!created && v.id !== base.id) {
    const kept =
      base.id === undefined
        ? `no base is recorded for this folder; pass the tip's id as --base to the next push from here (\`entity-versions list ${entity}\` shows it first)`
        : base.from === "--base"
          ? "this folder's recorded base is left as it was"
          : `the next push from here still builds on ${base.id} (from ${base.from})`;
    let newest: RestVersion | undefined;
    try {
      newest = (await api.call<RestVersionList>("GET", `${apiPath("entities", entity, "versions")}?page_size=1`)).body.versions[0];
    } catch (error) {
      // The push succeeded; only where the next one builds is unknown.
      output.warn(`could not read the tip of ${entity} (${error instanceof Error ? error.message : String(error)}), so ${kept}; if ${v.id} is the tip, pass --base ${v.id} to the next push.`);
      return [];
    }
    if (newest?.id !== v.id) return [`It is not the tip: ${kept}.`];
  }
  return nextPushLine(recordPushed(output, stateDir, service, entity, v));
}

/** A push of source that is already published: success, the existing version, activated if asked. */
async function finishDeduplicated(api: ApiClient, output: Output, entity: string, existing: RestVersion, activate: boolean, settle: () => Promise<string[]>): Promise<void> {
  let version = existing;
  if (activate && !existing.is_active) {
    version = (await api.call<RestVersion>("PUT", apiPath("entities", entity, "active-version"), { version_id: existing.id })).body;
  }
  const closing = await settle();
  output.result({ version, created: false, already_confirmed: false }, () =>
    [
      `${entity}: this source is already published as ${describeVersion(version)}; nothing was uploaded${version.is_active && !existing.is_active ? " (it is now active)" : ""}.`,
      "Use --force to publish it again as a new version.",
      ...closing,
    ].join("\n"),
  );
}

async function push(target: string, options: PushOptions): Promise<void> {
  const { output, settings, api: makeApi } = contextOf(options);
  const api = makeApi();
  const entity = options.entity;
  const source = await readPushSource(target);
  output.note(`Source ${source.summary}, source hash ${source.sourceHash}`);
  const base = resolveBase(options.base, source.stateDir, settings.url, entity);
  const force = options.force === true ? { force: true } : {};
  const baseField = base.id === undefined ? {} : { base_version_id: base.id };
  const pushed = { stateDir: source.stateDir, service: settings.url, entity, base };
  try {
    const { answer, version } = await requestUpload(
      api,
      entity,
      { version: options.version ?? versionStringAt(new Date()), source_hash: source.sourceHash, ...baseField, ...force },
      options.version === undefined,
    );
    if (answer.existing_version !== undefined) {
      const existing = answer.existing_version;
      await finishDeduplicated(api, output, entity, existing, options.activate === true, () => settleBase(api, output, pushed, existing, false));
      return;
    }
    const { upload_url: uploadUrl, storage_path: storagePath } = answer;
    if (uploadUrl === undefined || storagePath === undefined) {
      throw new CliError("the service answered upload-url with neither upload URLs nor an existing version.", "UNEXPECTED_RESPONSE");
    }
    const { confirmed, retried } = await uploadAndConfirm(
      api,
      output,
      entity,
      source,
      { ...answer, upload_url: uploadUrl, storage_path: storagePath },
      { version, ...baseField, set_as_active: options.activate === true, ...force },
    );
    const v = confirmed.version;
    // A retry answered with the version this upload already made: the
    // first confirm, whose answer was lost, was this push's, so this push
    // created it (the service can only say it was not created by the retry).
    const created = confirmed.created || (retried && confirmed.already_confirmed === true);
    const closing = await settleBase(api, output, pushed, v, created);
    output.result({ ...confirmed, created }, () =>
      [
        created
          ? `Published ${entity} ${describeVersion(v)} ${base.id === undefined ? "as its first version" : `on top of ${base.id}`}${v.is_active ? ", now active" : ""}${confirmed.created ? "" : " (the first confirm's answer was lost; the retry found the version)"}.`
          : `${entity}: this source is already published as ${describeVersion(v)}${retried ? " (the first confirm's answer was lost; the retry found the version)" : ""}.`,
        ...closing,
      ].join("\n"),
    );
  } catch (error) {
    if (error instanceof ServiceError && error.code === "STALE_BASE") {
      const elsewhere = base.id === undefined ? basesElsewhere(source.stateDir, settings.url, entity) : [];
      const repeat = [
        options.version === undefined ? "" : ` --version ${options.version}`,
        options.activate === true ? " --activate" : "",
        options.force === true ? " --force" : "",
        options.json === true ? " --json" : "",
      ].join("");
      throw staleBaseError(error, { entity, target, base: base.id, baseFrom: base.from, elsewhere, repeat }, settings);
    }
    if (error instanceof ServiceError && error.code === "ENTITY_NOT_FOUND" && settings.token !== undefined) throw withPushAccessHint(error, entity, settings.token);
    throw error;
  }
}

/**
 * ENTITY_NOT_FOUND on a push says nothing of why (the service hides which
 * entities exist from those who may not see them). The CLI can tell its
 * user the one cause it knows locally, from the token's own claims: the
 * roles a push needs, or whom to ask to be made a publisher.
 */
function withPushAccessHint(error: ServiceError, entity: string, token: string): CliError {
  const { roles, sub } = summariseToken(token);
  const hint =
    roles.includes("publisher") || roles.includes("admin")
      ? `a push needs you (${sub ?? "?"}) to be a publisher of ${entity}, unless nobody has pushed to it yet: a publisher can add you with \`entity-versions publisher add ${entity} ${sub ?? "USER"}\`.`
      : `a push needs the publisher (or admin) role, and this token has ${roles.length === 0 ? "no roles" : `only ${roles.join(", ")}`}: get a token with the publisher role (\`entity-versions whoami\` shows what it holds).`;
  return new CliError(error.message, error.code, error.exitCode, error.body, [...error.hints, hint]);
}

/** `push`: pack, hash, upload and confirm, with the folder's recorded base. */
export function registerPush(program: Command): void {
  withCommonOptions(
    program.command("push")
      .summary("publish a directory or a package file as a new version")
      .description(
        prose(`Publishes a new version of an entity. A directory is packed into a deterministic .tgz (sorted entries, fixed
mtimes and owners; .git, node_modules, .entity-versions.json and what .entityversionsignore lists are left out;
symbolic links are refused); a file is uploaded as it is. The source hash is a SHA-256 over the tree's paths,
executable bits and contents (over the file's bytes for a file), so pushing the same source again is
deduplicated: success, with the existing version printed. The directory's package.json is sent as the
version's package_json, and its package-lock.json is uploaded as the version's lockfile.

The push builds on the version this folder last pushed or downloaded (kept in .entity-versions.json, per
service and entity; for a file, in the current directory), or on --base. If someone else published since,
the service refuses with STALE_BASE (exit 3) and the CLI prints the tip and how to reconcile.`),
      )
      .argument("<path>", "a directory to pack, or a package file (e.g. a .tgz) to upload as is")
      .requiredOption("--entity <id>", "the entity to publish to", parseEntityId)
      .option("--version <version>", "the version string, YYYY.MM.DD-HHMMSS (default: now, UTC; moved on a second if taken)", parseVersionString)
      .option("--activate", "make the new version the active one (also activates an already published one)")
      .option("--force", "publish even if this source hash is already published (never bypasses STALE_BASE)")
      .option("--base <version-id>", "the version this push builds on (default: the one recorded for this folder)", parseVersionId)
      .addHelpText(
        "after",
        `
Examples:
  $ entity-versions push ./my-app --entity my-app
  $ entity-versions push ./my-app --entity my-app --activate
  $ entity-versions push dist/my-app.tgz --entity my-app --base 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10 --json`,
      )
      .action((target: string, options: PushOptions) => push(target, options)),
  );
}

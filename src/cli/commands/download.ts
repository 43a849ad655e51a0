import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import type { Command } from "commander";
import { apiPath } from "../api-client.js";
import { parseEntityId, parseVersionId } from "../arguments.js";
import { CliError, usageError } from "../cli-error.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { removeOnInterrupt } from "../interrupt.js";
import { describeVersion, displayPath, formatBytes } from "../output.js";
import type { RestDownloadAnswer, RestVersion } from "../rest-types.js";
import { tryRecordBase } from "../state-file.js";
import { unsignedUrl } from "../unsigned-url.js";

interface DownloadOptions extends CommonOptions {
  versionId?: string;
  active?: boolean;
  output: string;
  track: boolean;
}

/** Compares what was downloaded with what the service and the blob store say; a mismatch is a corrupt download. */
function verify(version: RestVersion, got: { sizeBytes: number; md5Base64: string; reportedMd5Base64: string | undefined }): string[] {
  const expected = Number(version.file_size_bytes);
  const problems: string[] = [];
  if (got.sizeBytes !== expected) problems.push(`${got.sizeBytes} bytes arrived where the version has ${expected}`);
  if (version.package_md5 !== undefined && version.package_md5 !== got.md5Base64) {
    problems.push(`its MD5 is ${got.md5Base64} where the version records ${version.package_md5}`);
  }
  if (got.reportedMd5Base64 !== undefined && got.reportedMd5Base64 !== got.md5Base64) {
    problems.push(`its MD5 is ${got.md5Base64} where the blob store reports ${got.reportedMd5Base64}`);
  }
  return problems;
}

/**
 * The file -o names, through a symbolic link to the file it points at (the
 * package is renamed into place, which would replace the link itself), and
 * only ever a regular file: a device or a pipe cannot be renamed over.
 */
async function outputFile(output: string, entity: string): Promise<string> {
  let target = path.resolve(output);
  // Link by link, a link to a file not made yet included (realpath fails on those): as many as the system follows.
  for (let hops = 0; (await fs.lstat(target).catch(() => undefined))?.isSymbolicLink() === true; hops++) {
    if (hops === 40) throw usageError(`-o ${output} is a chain of more than 40 symbolic links: name the file to write.`);
    target = path.resolve(path.dirname(target), await fs.readlink(target));
  }
  const folder = await fs.stat(path.dirname(target)).catch(() => undefined);
  if (folder?.isDirectory() !== true) throw usageError(`the folder of -o ${output} does not exist: create it first.`);
  // Checked before any call: the package is first written to a hidden
  // file beside the target, whose name the system's error would give instead.
  try {
    await fs.access(path.dirname(target), fs.constants.W_OK | fs.constants.X_OK);
  } catch {
    throw usageError(`cannot write in ${displayPath(path.dirname(target))} (the folder of -o ${output}): choose a writable folder.`);
  }
  const existing = await fs.stat(target).catch(() => undefined);
  if (existing?.isDirectory() === true) {
    throw usageError(`-o ${output} is a folder: name the file to write, e.g. -o ${path.join(output, `${entity}.tgz`)}.`);
  }
  if (existing !== undefined && !existing.isFile()) {
    throw usageError(`-o ${output} is not a regular file (a device, a pipe, a socket): name a file to write; the package is written whole once verified, never as a stream.`);
  }
  return target;
}

/** The longest start of `name` of at most `maxBytes` UTF-8 bytes: a scratch name that stays within a file name's 255 bytes, however long the target's. */
function prefixOfBytes(name: string, maxBytes: number): string {
  let out = "";
  let bytes = 0;
  for (const ch of name) {
    bytes += Buffer.byteLength(ch);
    if (bytes > maxBytes) break;
    out += ch;
  }
  return out;
}

async function download(entity: string, options: DownloadOptions): Promise<void> {
  if (options.versionId !== undefined && options.active === true) throw usageError("give --version-id or --active, not both.");
  const target = await outputFile(options.output, entity);
  const { output, settings, api: makeApi } = contextOf(options);
  const api = makeApi();
  const versionId =
    options.versionId ?? (await api.call<RestVersion>("GET", apiPath("entities", entity, "active-version"))).body.id;
  const answer = (await api.call<RestDownloadAnswer>("GET", apiPath("entities", entity, "versions", versionId, "download"))).body;
  const version = answer.version;

  // Written beside the target and renamed once verified, so a failed download never leaves a file that looks complete.
  const partial = path.join(path.dirname(target), `.${prefixOfBytes(path.basename(target), 240)}.${randomBytes(4).toString("hex")}.part`);
  // Loaded here: the Azure SDK is most of the CLI's start-up time, and only push and download need it.
  const { downloadFile } = await import("../blob-transfer.js");
  const forget = removeOnInterrupt(partial);
  try {
    const got = await downloadFile(answer.download_url, partial, Number(version.file_size_bytes), "download", output.json);
    const problems = verify(version, got);
    if (problems.length > 0) {
      throw new CliError(`the download of ${describeVersion(version)} is corrupt: ${problems.join("; ")}. Nothing was written to ${options.output}; run the command again.`, "DOWNLOAD_CORRUPT");
    }
    await fs.rename(partial, target);
    const checks = [`size ${formatBytes(got.sizeBytes)}`];
    if (version.package_md5 !== undefined || got.reportedMd5Base64 !== undefined) checks.push("MD5");
    const recorded =
      options.track
        ? tryRecordBase(process.cwd(), settings.url, entity, {
            version_id: version.id,
            version: version.version,
            source_hash: version.source_hash,
            via: "download",
            recorded_at: new Date().toISOString(),
          })
        : undefined;
    if (recorded?.problem !== undefined) {
      output.warn(`${version.id} could not be recorded as the base of a push from this folder (${recorded.problem}); pass --base ${version.id} to such a push, or download with --no-track.`);
    }
    // The answer as the service gave it, but for the download links' signatures:
    // they would let anyone reading the output (a CI log) download the package.
    output.result({ ...answer, download_url: unsignedUrl(answer.download_url), ...(answer.lockfile_download_url === undefined ? {} : { lockfile_download_url: unsignedUrl(answer.lockfile_download_url) }) }, () =>
      [
        `Downloaded ${entity} ${describeVersion(version)} to ${options.output} (${checks.join(" and ")} verified).`,
        ...(recorded === undefined || recorded.problem !== undefined ? [] : [`A push from this folder now builds on it (recorded in ${displayPath(recorded.file)}).`]),
      ].join("\n"),
    );
  } finally {
    await fs.rm(partial, { force: true });
    forget();
  }
}

/** `download`: fetches a version's package through its signed URL and verifies it. */
export function registerDownload(program: Command): void {
  withCommonOptions(
    program.command("download")
      .summary("download a version's package and verify it")
      .description(
        prose(`Downloads the package of a version (the active one unless --version-id is given) to a file, and checks its
size against the version's file_size_bytes and its MD5 against what the service and the blob store report,
when they do. The file appears only once it is verified.

The downloaded version becomes the base of the next push from the current directory (recorded in its
.entity-versions.json), as after a push: download the tip, merge it, push on top. --no-track leaves the
record alone.`),
      )
      .argument("<entity>", "the entity", parseEntityId)
      .option("--version-id <id>", "the version to download", parseVersionId)
      .option("--active", "download the active version (the default)")
      .requiredOption("-o, --output <file>", "where to write the package")
      .option("--no-track", "do not record the version as this folder's base")
      .addHelpText(
        "after",
        `
Examples:
  $ entity-versions download my-app -o my-app.tgz
  $ entity-versions download my-app --version-id 0b5c2f0e-3a1d-4c55-9f7e-2d8a4c1b9e10 -o tip.tgz`,
      )
      .action((entity: string, options: DownloadOptions) => download(entity, options)),
  );
}

import fs from "node:fs/promises";
import path from "node:path";
import { CliError } from "./cli-error.js";
import { ExitCode } from "./exit-codes.js";
import { formatBytes } from "./output.js";
import { sha256OfFile } from "./file-digest.js";
import { type HashedFile, hashFiles, sourceHashOfListing } from "./source-hash.js";
import { listSourceTree } from "./source-tree.js";

/** What a push sends, before anything is packed or uploaded. */
export type PushSource =
  | {
      readonly kind: "directory";
      readonly root: string;
      readonly files: readonly HashedFile[];
      readonly sourceHash: string;
      /** The root's package.json, sent as `package_json`. */
      readonly packageJson: Record<string, unknown> | undefined;
      /** The root's package-lock.json, uploaded as the version's lockfile. */
      readonly lockfile: HashedFile | undefined;
      /** Where the state file lives: the pushed directory. */
      readonly stateDir: string;
      readonly summary: string;
    }
  | {
      readonly kind: "file";
      readonly file: string;
      readonly sizeBytes: number;
      readonly sourceHash: string;
      /** Where the state file lives: the current directory (a built package often sits in a scratch folder). */
      readonly stateDir: string;
      readonly summary: string;
    };

async function readPackageJson(file: string): Promise<Record<string, unknown> | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  let value: unknown;
  try {
    // A leading byte order mark, which npm reads past too.
    value = JSON.parse(text.replace(/^\uFEFF/, ""));
  } catch (error) {
    throw new CliError(`${file} is not valid JSON (${(error as Error).message}): fix it, or list it in .entityversionsignore.`, "INVALID_PACKAGE_JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new CliError(`${file} is not a JSON object: fix it, or list it in .entityversionsignore.`, "INVALID_PACKAGE_JSON");
  }
  return value as Record<string, unknown>;
}

/**
 * Reads what `push <path>` would publish and its source hash. A directory
 * is listed (ignore rules applied) and each file hashed; its root's
 * package.json and package-lock.json, when packed, also go to the service
 * as the version's manifest and lockfile. A file is uploaded as it is and
 * its source hash is the SHA-256 of its bytes.
 */
export async function readPushSource(target: string, cwd = process.cwd()): Promise<PushSource> {
  // An empty path resolves to the working folder: an unset variable in a
  // script (`push "$DIST"`) would publish whatever is there, secrets too.
  if (target.trim() === "") {
    throw new CliError('the path to push is empty (an unset variable?): give a directory to pack or a package file to upload ("." for this folder).', "INVALID_ARGUMENT", ExitCode.usage);
  }
  const absolute = path.resolve(cwd, target);
  let stat;
  try {
    stat = await fs.stat(absolute);
  } catch {
    throw new CliError(`${target} does not exist: give a directory to pack or a package file to upload.`, "SOURCE_NOT_FOUND", ExitCode.usage);
  }
  if (stat.isFile()) {
    if (stat.size === 0) throw new CliError(`${target} is empty: a package holds at least one byte.`, "EMPTY_SOURCE");
    let sourceHash: string;
    try {
      sourceHash = await sha256OfFile(absolute);
    } catch (error) {
      const err = new CliError(`cannot read ${target} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): make it readable, or push another file.`, "SOURCE_UNREADABLE");
      err.cause = error;
      throw err;
    }
    return {
      kind: "file",
      file: absolute,
      sizeBytes: stat.size,
      sourceHash,
      stateDir: cwd,
      summary: `${target} (${formatBytes(stat.size)}, uploaded as is)`,
    };
  }
  if (!stat.isDirectory()) throw new CliError(`${target} is neither a directory nor a file (a device, a pipe, a socket): push a folder (or a single file).`, "SOURCE_NOT_FOUND", ExitCode.usage);
  const files = await hashFiles(await listSourceTree(absolute));
  if (files.length === 0) {
    throw new CliError(
      `${target} has no files to pack: it is empty, or every file in it is left out (by its .entityversionsignore, or as .git, node_modules and the state file always are): check the path, and the ignore file's lines.`,
      "EMPTY_SOURCE",
    );
  }
  const packed = new Set(files.map((f) => f.path));
  const bytes = files.reduce((sum, f) => sum + f.size, 0);
  return {
    kind: "directory",
    root: absolute,
    files,
    sourceHash: sourceHashOfListing(files),
    packageJson: packed.has("package.json") ? await readPackageJson(path.join(absolute, "package.json")) : undefined,
    lockfile: files.find((f) => f.path === "package-lock.json"),
    stateDir: absolute,
    summary: `${target} (${files.length} file${files.length === 1 ? "" : "s"}, ${formatBytes(bytes)})`,
  };
}

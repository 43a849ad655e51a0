import { entityIdPattern } from "../domain/identifiers.js";

/** Blob name of the package inside an upload's folder. */
export const packageFileName = "package";
/** Blob name of the lockfile inside an upload's folder. */
export const lockfileFileName = "package-lock.json";

/**
 * Where an upload's blobs live. Clients write only under `uploads/` (the
 * staging area: every write SAS this service signs names a blob there);
 * confirm copies what they wrote under `versions/`, for which no write SAS
 * is ever signed, so a published version cannot be changed by anyone
 * holding an old upload URL. `legacy` is the layout of versions confirmed
 * before the staging area existed (`{entity}/{upload}/…`): they are still
 * served and deleted, never written.
 */
export type BlobArea = "staging" | "final" | "legacy";

/** The prefixes of the areas this service writes; the sweeper never looks anywhere else. */
export const areaPrefixes: Readonly<Record<Exclude<BlobArea, "legacy">, string>> = Object.freeze({ staging: "uploads/", final: "versions/" });

const uploadIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The package and lockfile paths of an upload in one area. */
export interface UploadBlobPaths {
  readonly storagePath: string;
  readonly lockPath: string;
}

/** The two blob paths an upload owns in an area: `{area}{entity}/{upload}/package` and `…/package-lock.json`. */
export function uploadPaths(entityId: string, uploadId: string, area: BlobArea): UploadBlobPaths {
  const prefix = area === "legacy" ? "" : areaPrefixes[area];
  return {
    storagePath: `${prefix}${entityId}/${uploadId}/${packageFileName}`,
    lockPath: `${prefix}${entityId}/${uploadId}/${lockfileFileName}`,
  };
}

/** A blob path this service issues, taken apart. */
export interface ParsedUploadPath {
  readonly area: BlobArea;
  readonly entityId: string;
  /** The upload's id; in the final area, the version's (the upload's, for versions confirmed before versions had their own folders). */
  readonly uploadId: string;
  readonly file: "package" | "lockfile";
}

/**
 * Takes apart a blob path this service issued; undefined for any other
 * string. Confirm uses it to refuse paths it never handed out, and the
 * sweeper to tell its own blobs from strangers.
 */
export function parseUploadPath(path: string): ParsedUploadPath | undefined {
  const parts = path.split("/");
  let area: BlobArea = "legacy";
  if (parts.length === 4) {
    const prefix = `${parts.shift()!}/`;
    if (prefix === areaPrefixes.staging) area = "staging";
    else if (prefix === areaPrefixes.final) area = "final";
    else return undefined;
  }
  if (parts.length !== 3) return undefined;
  const [entityId, uploadId, name] = parts as [string, string, string];
  if (!entityIdPattern.test(entityId) || !uploadIdPattern.test(uploadId)) return undefined;
  if (name === packageFileName) return { area, entityId, uploadId, file: "package" };
  if (name === lockfileFileName) return { area, entityId, uploadId, file: "lockfile" };
  return undefined;
}

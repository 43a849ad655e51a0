import { entityIdPattern } from "../domain/identifiers.js";

/** Blob name of the package inside an upload's folder. */
export const packageFileName = "package";
/** Blob name of the lockfile inside an upload's folder. */
export const lockfileFileName = "package-lock.json";

const uploadIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The two blob paths an upload owns: `{entity}/{upload}/package` and `…/package-lock.json`. */
export function uploadPaths(entityId: string, uploadId: string): { storagePath: string; lockPath: string } {
  return {
    storagePath: `${entityId}/${uploadId}/${packageFileName}`,
    lockPath: `${entityId}/${uploadId}/${lockfileFileName}`,
  };
}

/** A blob path this service issues, taken apart. */
export interface ParsedUploadPath {
  readonly entityId: string;
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
  if (parts.length !== 3) return undefined;
  const [entityId, uploadId, name] = parts as [string, string, string];
  if (!entityIdPattern.test(entityId) || !uploadIdPattern.test(uploadId)) return undefined;
  if (name === packageFileName) return { entityId, uploadId, file: "package" };
  if (name === lockfileFileName) return { entityId, uploadId, file: "lockfile" };
  return undefined;
}

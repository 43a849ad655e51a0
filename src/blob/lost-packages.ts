import type { RecordedPackage } from "../store/migrate.js";
import { areaPrefixes } from "./blob-paths.js";
import type { BlobStore } from "./blob-store.js";

/** A version whose package or lockfile, recorded in the database, the blob store does not hold: what the start names, so that its owner can push it again. */
export interface LostPackage {
  readonly entityId: string;
  readonly versionId: string;
  readonly version: string;
  readonly missing: ReadonlyArray<"package" | "lockfile">;
}

/**
 * The versions whose blobs are gone, or undefined when the versions area
 * holds more than `maxListed` blobs (not checked). The area is listed once,
 * not each blob asked for; only paths of the layout before it (versions
 * confirmed before the staging area existed) are asked for one by one.
 */
export async function lostPackages(store: BlobStore, versions: readonly RecordedPackage[], maxListed: number): Promise<LostPackage[] | undefined> {
  const held = new Set<string>();
  for await (const blob of store.list(areaPrefixes.final)) {
    if (held.size >= maxListed) return undefined;
    held.add(blob.name);
  }
  const holds = async (path: string) => held.has(path) || (!path.startsWith(areaPrefixes.final) && (await store.stat(path)) !== undefined);
  const lost: LostPackage[] = [];
  for (const v of versions) {
    const missing: Array<"package" | "lockfile"> = [];
    if (!(await holds(v.storagePath))) missing.push("package");
    if (v.lockPath !== undefined && !(await holds(v.lockPath))) missing.push("lockfile");
    if (missing.length > 0) lost.push({ entityId: v.entityId, versionId: v.versionId, version: v.version, missing });
  }
  return lost;
}

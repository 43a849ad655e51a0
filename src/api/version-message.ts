import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { VersionRefSchema, VersionSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import type { VersionRecord } from "../store/version-store.js";

/** A stored version as the API's Version message. */
export function toVersionMessage(v: VersionRecord): MessageInitShape<typeof VersionSchema> {
  return {
    id: v.id,
    entityId: v.entityId,
    version: v.version,
    sourceHash: v.sourceHash,
    storagePath: v.storagePath,
    fileSizeBytes: BigInt(v.fileSizeBytes),
    ...(v.packageMd5 === undefined ? {} : { packageMd5: v.packageMd5 }),
    ...(v.packageLockPath === undefined ? {} : { packageLockPath: v.packageLockPath }),
    serviceDependencies: [...v.serviceDependencies],
    ...(v.packageJson === undefined ? {} : { packageJson: v.packageJson as never }),
    ...(v.baseVersionId === undefined ? {} : { baseVersionId: v.baseVersionId }),
    publishedBy: v.publishedBy,
    createdAt: timestampFromDate(v.createdAt),
    isActive: v.isActive,
  };
}

/** A stored version as the short VersionRef of a STALE_BASE error. */
export function toVersionRef(v: VersionRecord): MessageInitShape<typeof VersionRefSchema> {
  return { id: v.id, version: v.version, publishedBy: v.publishedBy, createdAt: timestampFromDate(v.createdAt) };
}

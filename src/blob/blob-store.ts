/** Size, age and fingerprint of a stored blob. */
export interface BlobStat {
  readonly size: number;
  readonly lastModified: Date;
  /** Content-MD5 as the store reports it (base64); undefined when the blob has none (a block upload that set none). */
  readonly md5: string | undefined;
  /** The blob's ETag: changes whenever its content does. */
  readonly etag: string;
  /**
   * "BlockBlob", "PageBlob" or "AppendBlob". An upload URL lets its holder
   * create any of them; only a block blob is copied as bytes everywhere
   * (Azurite's copy of a page or append blob shares its page or block list
   * with the source, which later writes to the source then change).
   */
  readonly blobType: string;
}

/** How a copy into the final area ended. */
export type CopyOutcome =
  /** The destination now holds the source's content as it was at `ifMatch`. */
  | "copied"
  /** The destination already existed: it is never overwritten. */
  | "exists"
  /** There is no source blob. */
  | "source-missing"
  /** The source changed since it was checked (its ETag is no longer `ifMatch`). */
  | "source-changed";

/**
 * Where packages live. The service never moves package bytes itself: it
 * signs URLs that let a client PUT or GET exactly one blob, and checks,
 * copies (server-side) or deletes blobs by name. Every call takes the
 * caller's signal, so a call past its deadline stops waiting on the store.
 */
export interface BlobStore {
  /** A URL that may create and write the one blob at `path` until `expiresOn`. */
  signUploadUrl(path: string, expiresOn: Date): string;
  /** A URL that may read the one blob at `path` until `expiresOn`. */
  signDownloadUrl(path: string, expiresOn: Date): string;
  /** The blob's size, age and fingerprint; undefined when there is no blob at `path`. */
  stat(path: string, signal?: AbortSignal): Promise<BlobStat | undefined>;
  /**
   * Copies `source` to `destination` inside the store, only if the source
   * still has ETag `ifMatch` (when given) and only if the destination does
   * not exist yet, so the first copy to a destination is the only one.
   */
  copyOnce(source: string, destination: string, ifMatch: string | undefined, signal?: AbortSignal): Promise<CopyOutcome>;
  /**
   * Deletes the blob at `path`; no blob there is not an error. Resolves
   * true when this call deleted a blob, false when there was none (someone
   * else deleted it first), so that what is counted as deleted was.
   */
  deleteIfExists(path: string, signal?: AbortSignal): Promise<boolean>;
  /** Every blob whose name starts with `prefix`, page by page. */
  list(prefix: string): AsyncIterable<BlobListing>;
  /** Resolves when the container is reachable; for readiness checks. */
  ping(): Promise<void>;
}

/** A blob as listed. */
export interface BlobListing {
  readonly name: string;
  readonly lastModified: Date;
}

/**
 * The blob store could not be reached or answered with a server error: the
 * caller answers UNAVAILABLE and nothing was changed.
 */
export class BlobStoreUnavailableError extends Error {
  override name = "BlobStoreUnavailableError";
}

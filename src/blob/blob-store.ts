/** Size and age of a stored blob. */
export interface BlobStat {
  readonly size: number;
  readonly lastModified: Date;
}

/**
 * Where packages live. The service never moves package bytes itself: it
 * signs URLs that let a client PUT or GET exactly one blob, and checks or
 * deletes blobs by name.
 */
export interface BlobStore {
  /** A URL that may create and write the one blob at `path` until `expiresOn`. */
  signUploadUrl(path: string, expiresOn: Date): string;
  /** A URL that may read the one blob at `path` until `expiresOn`. */
  signDownloadUrl(path: string, expiresOn: Date): string;
  /** The blob's size and age; undefined when there is no blob at `path`. */
  stat(path: string): Promise<BlobStat | undefined>;
  /** Deletes the blob at `path`; no blob there is not an error. */
  deleteIfExists(path: string): Promise<void>;
  /** Every blob in the container, page by page. */
  list(): AsyncIterable<BlobListing>;
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

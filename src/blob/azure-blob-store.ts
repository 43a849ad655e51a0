import {
  BlobSASPermissions,
  BlobServiceClient,
  type ContainerClient,
  generateBlobSASQueryParameters,
  SASProtocol,
  StorageSharedKeyCredential,
} from "@azure/storage-blob";
import { deadlineSignal } from "../rpc/deadline-signal.js";
import { connectionStringPart } from "./connection-string.js";
import { type BlobListing, type BlobStat, type BlobStore, BlobStoreUnavailableError, type CopyOutcome } from "./blob-store.js";

/** Options of the Azure blob store. */
export interface AzureBlobStoreOptions {
  readonly connectionString: string;
  readonly container: string;
  /** Bound on each blob call, retries included. */
  readonly timeoutMs?: number;
}

const uploadPermissions = BlobSASPermissions.parse("cw");
/** Lifetime of the read SAS naming a copy's source: the copy is synchronous. */
const copySourceSasMs = 5 * 60_000;
const downloadPermissions = BlobSASPermissions.parse("r");
/** The blob naming the database whose packages a container holds (claimFor). */
const ownerBlobName = "entity-versions-owner.json";

/** Which database's packages a container holds, and since when. */
export interface ContainerOwner {
  readonly databaseId: string;
  readonly claimedAt: string;
}

/** The shortest lease Azure grants: the service's own, held only for its delete. */
const deleteLeaseSeconds = 15;

/** The store's `x-ms-error-code` of a failed call (RestError's `code`). */
function storageErrorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}

/** How the store answers a download URL, set in its SAS: see signDownloadUrl. */
const downloadAnswerHeaders = Object.freeze({ contentType: "application/octet-stream", contentDisposition: "attachment", contentEncoding: "identity" });

/**
 * Azure Blob Storage (or Azurite) through @azure/storage-blob. SAS URLs are
 * service SAS signed locally with the account key, with no network call.
 */
export class AzureBlobStore implements BlobStore {
  readonly #container: ContainerClient;
  readonly #credential: StorageSharedKeyCredential;
  readonly #protocol: SASProtocol;
  readonly #timeoutMs: number;

  constructor(options: AzureBlobStoreOptions) {
    const accountName = connectionStringPart(options.connectionString, "AccountName");
    const accountKey = connectionStringPart(options.connectionString, "AccountKey");
    if (accountName === undefined || accountKey === undefined) {
      throw new Error("the Azure Storage connection string must carry AccountName and AccountKey");
    }
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    const service = BlobServiceClient.fromConnectionString(options.connectionString, {
      retryOptions: { maxTries: 3, tryTimeoutInMs: this.#timeoutMs, retryDelayInMs: 100, maxRetryDelayInMs: 1_000 },
    });
    this.#container = service.getContainerClient(options.container);
    this.#credential = new StorageSharedKeyCredential(accountName, accountKey);
    this.#protocol = this.#container.url.startsWith("https:") ? SASProtocol.Https : SASProtocol.HttpsAndHttp;
  }

  #sign(path: string, permissions: BlobSASPermissions, expiresOn: Date, answerHeaders: { contentType?: string; contentDisposition?: string } = {}): string {
    const sas = generateBlobSASQueryParameters(
      { containerName: this.#container.containerName, blobName: path, permissions, expiresOn, protocol: this.#protocol, ...answerHeaders },
      this.#credential,
    );
    return `${this.#container.getBlobClient(path).url}?${sas.toString()}`;
  }

  signUploadUrl(path: string, expiresOn: Date): string {
    return this.#sign(path, uploadPermissions, expiresOn);
  }

  /**
   * A read SAS whose answer is a download, whatever the publisher uploaded
   * the package with: the store answers it `Content-Type:
   * application/octet-stream`, `Content-Disposition: attachment` and
   * `Content-Encoding: identity` (the SAS's rsct, rscd and rsce), so a
   * package uploaded as `text/html`, `inline`, opened from its link, is
   * saved, never rendered on the storage account's origin; and one
   * uploaded with `Content-Encoding: gzip` is the same bytes to every
   * client, not unpacked by those that decode (browsers, fetch) and kept
   * by those that do not, against one recorded size and MD5.
   */
  signDownloadUrl(path: string, expiresOn: Date): string {
    return this.#sign(path, downloadPermissions, expiresOn, downloadAnswerHeaders);
  }

  /**
   * Runs one store call bounded by the store's timeout and the caller's
   * signal. A call the caller gave up on rejects with the caller's reason
   * (its deadline), anything else that fails as BlobStoreUnavailableError.
   */
  async #call<T>(what: string, run: (signal: AbortSignal) => Promise<T>, caller?: AbortSignal): Promise<T> {
    // Released when the call ends (deadlineSignal says why not AbortSignal.timeout).
    const bound = deadlineSignal(caller, this.#timeoutMs, () => new Error(`the blob store took more than ${this.#timeoutMs} ms`));
    try {
      return await run(bound.signal);
    } catch (error) {
      if (caller?.aborted === true) throw caller.reason;
      throw new BlobStoreUnavailableError(`blob store: ${what} failed`, { cause: error });
    } finally {
      bound.dispose();
    }
  }

  /** The container's URL: where its blobs are, with no credential in it (a start's refusal names it). */
  get url(): string {
    return this.#container.url;
  }

  /** The database the container records as its owner (see claimFor), or undefined when it records none. */
  async recordedOwner(): Promise<ContainerOwner | undefined> {
    return this.#call("read the container's owner", async (abortSignal) => {
      try {
        const recorded = JSON.parse((await this.#container.getBlockBlobClient(ownerBlobName).downloadToBuffer(0, undefined, { abortSignal })).toString("utf8")) as {
          database_id?: unknown;
          claimed_at?: unknown;
        };
        return { databaseId: String(recorded.database_id), claimedAt: String(recorded.claimed_at) };
      } catch (error) {
        if ((error as { statusCode?: number }).statusCode === 404) return undefined;
        throw error;
      }
    });
  }

  /**
   * Records that this container holds the packages of database
   * `databaseId`, unless it already holds another's: returns the owner it
   * records, this one or the other. Written once (If-None-Match: *) to a
   * name outside the service's areas (`uploads/`, `versions/`), which the
   * sweeper never lists, so it is never taken for a stray.
   */
  async claimFor(databaseId: string): Promise<ContainerOwner> {
    return this.#call("claim the container", async (abortSignal) => {
      const blob = this.#container.getBlockBlobClient(ownerBlobName);
      const mine: ContainerOwner = { databaseId, claimedAt: new Date().toISOString() };
      const body = JSON.stringify({ database_id: mine.databaseId, claimed_at: mine.claimedAt });
      try {
        await blob.upload(body, Buffer.byteLength(body), { abortSignal, conditions: { ifNoneMatch: "*" }, blobHTTPHeaders: { blobContentType: "application/json" } });
        return mine;
      } catch (error) {
        const status = (error as { statusCode?: number }).statusCode;
        if (status !== 409 && status !== 412) throw error;
      }
      // Written by the account's key only: no upload URL names it.
      const recorded = JSON.parse((await blob.downloadToBuffer(0, undefined, { abortSignal })).toString("utf8")) as { database_id?: unknown; claimed_at?: unknown };
      return { databaseId: String(recorded.database_id), claimedAt: String(recorded.claimed_at) };
    });
  }

  /**
   * Records database `databaseId` as the container's owner in place of
   * `previous`, unless the record changed since it named `previous`
   * (also while this call wrote it: two replicas starting at once):
   * returns the owner recorded now.
   */
  async reclaimFor(databaseId: string, previous: string): Promise<ContainerOwner> {
    return this.#call("claim the container", async (abortSignal) => {
      const blob = this.#container.getBlockBlobClient(ownerBlobName);
      const read = await blob.download(0, undefined, { abortSignal });
      const chunks: Buffer[] = [];
      for await (const chunk of read.readableStreamBody ?? []) chunks.push(Buffer.from(chunk as Uint8Array));
      const recorded = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { database_id?: unknown; claimed_at?: unknown };
      if (String(recorded.database_id) !== previous) return { databaseId: String(recorded.database_id), claimedAt: String(recorded.claimed_at) };
      const mine: ContainerOwner = { databaseId, claimedAt: new Date().toISOString() };
      const body = JSON.stringify({ database_id: mine.databaseId, claimed_at: mine.claimedAt });
      try {
        await blob.upload(body, Buffer.byteLength(body), { abortSignal, conditions: { ifMatch: read.etag ?? "*" }, blobHTTPHeaders: { blobContentType: "application/json" } });
        return mine;
      } catch (error) {
        if ((error as { statusCode?: number }).statusCode !== 412) throw error;
      }
      // Another start (most likely a replica of this database) claimed it
      // since it was read: what it records now is the answer, this id or another.
      const now = JSON.parse((await blob.downloadToBuffer(0, undefined, { abortSignal })).toString("utf8")) as { database_id?: unknown; claimed_at?: unknown };
      return { databaseId: String(now.database_id), claimedAt: String(now.claimed_at) };
    });
  }

  /** Creates the container when it is missing; run once at start-up. */
  async ensureContainer(): Promise<void> {
    await this.#call("create container", (abortSignal) => this.#container.createIfNotExists({ abortSignal }));
  }

  async stat(path: string, caller?: AbortSignal): Promise<BlobStat | undefined> {
    return this.#call(
      "get properties",
      async (abortSignal) => {
        try {
          const p = await this.#container.getBlobClient(path).getProperties({ abortSignal });
          return {
            size: p.contentLength ?? 0,
            lastModified: p.lastModified ?? new Date(0),
            md5: p.contentMD5 === undefined ? undefined : Buffer.from(p.contentMD5).toString("base64"),
            etag: p.etag ?? "",
            blobType: p.blobType ?? "blob of no reported type",
          };
        } catch (error) {
          if ((error as { statusCode?: number }).statusCode === 404) return undefined;
          throw error;
        }
      },
      caller,
    );
  }

  /**
   * Copy Blob From URL (synchronous, same account; up to 256 MiB): the
   * source is named by a short read SAS signed here, the copy is refused
   * when the source's ETag is no longer `ifMatch` (412) and when the
   * destination exists (If-None-Match: *, 409), so a final blob is written
   * once and never again.
   */
  async copyOnce(source: string, destination: string, ifMatch: string | undefined, caller?: AbortSignal): Promise<CopyOutcome> {
    const sourceUrl = this.#sign(source, downloadPermissions, new Date(Date.now() + copySourceSasMs));
    return this.#call(
      "copy",
      async (abortSignal) => {
        try {
          await this.#container.getBlockBlobClient(destination).syncCopyFromURL(sourceUrl, {
            abortSignal,
            conditions: { ifNoneMatch: "*" },
            ...(ifMatch === undefined ? {} : { sourceConditions: { ifMatch } }),
          });
          return "copied";
        } catch (error) {
          const status = (error as { statusCode?: number }).statusCode;
          if (status === 409) return "exists";
          if (status === 404) return "source-missing";
          if (status === 412) return "source-changed";
          throw error;
        }
      },
      caller,
    );
  }

  /**
   * Deletes a blob with its snapshots, whatever a holder of its upload URL
   * did to it. Azure grants no write without lease and snapshot (the
   * upload SAS's `cw`), so an uploader can lease its staged blob for good,
   * or snapshot it, and a plain delete is then refused for ever (412
   * LeaseIdMissing, 409 SnapshotsPresent): its blobs would stay, and the
   * sweeper and the deleter would retry them without end. A lease is
   * broken and taken by the service for the delete; an uploader who takes
   * it again in between (only while its URL lasts) makes this call fail,
   * and the deleter's next attempt goes on. True when this call deleted
   * the blob, false when it was gone already.
   */
  async deleteIfExists(path: string, caller?: AbortSignal): Promise<boolean> {
    return this.#call(
      "delete",
      async (abortSignal) => {
        const blob = this.#container.getBlobClient(path);
        try {
          return (await blob.deleteIfExists({ abortSignal, deleteSnapshots: "include" })).succeeded;
        } catch (error) {
          if (storageErrorCode(error) !== "LeaseIdMissing") throw error;
        }
        await blob.getBlobLeaseClient().breakLease(0, { abortSignal });
        const lease = blob.getBlobLeaseClient();
        try {
          await lease.acquireLease(deleteLeaseSeconds, { abortSignal });
        } catch (error) {
          if ((error as { statusCode?: number }).statusCode === 404) return false;
          throw error;
        }
        return (await blob.deleteIfExists({ abortSignal, deleteSnapshots: "include", conditions: { leaseId: lease.leaseId } })).succeeded;
      },
      caller,
    );
  }

  async *list(prefix: string): AsyncIterable<BlobListing> {
    let continuationToken: string | undefined;
    do {
      const page = await this.#call("list", async (abortSignal) => {
        const pages = this.#container.listBlobsFlat({ abortSignal, prefix }).byPage({ maxPageSize: 1000, ...(continuationToken === undefined ? {} : { continuationToken }) });
        return (await pages.next()).value as { continuationToken?: string; segment: { blobItems: Array<{ name: string; properties: { lastModified: Date } }> } } | undefined;
      });
      if (page === undefined) return;
      for (const item of page.segment.blobItems) yield { name: item.name, lastModified: item.properties.lastModified };
      continuationToken = page.continuationToken === "" ? undefined : page.continuationToken;
    } while (continuationToken !== undefined);
  }

  async ping(): Promise<void> {
    await this.#call("get container properties", (abortSignal) => this.#container.getProperties({ abortSignal }));
  }
}

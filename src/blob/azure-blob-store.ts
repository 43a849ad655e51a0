import http from "node:http";
import https from "node:https";
import {
  BlobSASPermissions,
  BlobServiceClient,
  type ContainerClient,
  ContainerSASPermissions,
  generateBlobSASQueryParameters,
  SASProtocol,
  StorageSharedKeyCredential,
} from "@azure/storage-blob";
import { type BlobListing, type BlobStat, type BlobStore, BlobStoreUnavailableError, type CopyOutcome } from "./blob-store.js";

/** Options of the Azure blob store. */
export interface AzureBlobStoreOptions {
  readonly connectionString: string;
  readonly container: string;
  /** Bound on each blob call, retries included. */
  readonly timeoutMs?: number;
  /** Milliseconds since the epoch; tests move it to see the read SAS renewed. */
  readonly now?: () => number;
}

function connectionStringPart(connectionString: string, name: string): string | undefined {
  for (const part of connectionString.split(";")) {
    const at = part.indexOf("=");
    if (at > 0 && part.slice(0, at).trim().toLowerCase() === name.toLowerCase()) return part.slice(at + 1).trim();
  }
  return undefined;
}

const uploadPermissions = BlobSASPermissions.parse("cw");
/** Lifetime of the read SAS naming a copy's source: the copy is synchronous. */
const copySourceSasMs = 5 * 60_000;
const downloadPermissions = BlobSASPermissions.parse("r");
const containerReadPermissions = ContainerSASPermissions.parse("r");

/**
 * The in-process read SAS of the blob checks lives 25 minutes and is used
 * for the first 10: it always has 15 minutes left, the clock skew the SDK's
 * shared-key requests tolerate.
 */
const readSasLifetimeMs = 25 * 60_000;
const readSasUseMs = 10 * 60_000;

/**
 * Azure Blob Storage (or Azurite) through @azure/storage-blob. SAS URLs are
 * service SAS signed locally with the account key: about 6 µs, no network.
 */
export class AzureBlobStore implements BlobStore {
  readonly #container: ContainerClient;
  readonly #credential: StorageSharedKeyCredential;
  readonly #protocol: SASProtocol;
  readonly #timeoutMs: number;
  readonly #agent: http.Agent;
  readonly #request: typeof http.request;
  readonly #now: () => number;
  #readSas: { query: string; signedAt: number } | undefined;

  constructor(options: AzureBlobStoreOptions) {
    const accountName = connectionStringPart(options.connectionString, "AccountName");
    const accountKey = connectionStringPart(options.connectionString, "AccountKey");
    if (accountName === undefined || accountKey === undefined) {
      throw new Error("the Azure Storage connection string must carry AccountName and AccountKey");
    }
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#now = options.now ?? Date.now;
    const service = BlobServiceClient.fromConnectionString(options.connectionString, {
      retryOptions: { maxTries: 3, tryTimeoutInMs: this.#timeoutMs, retryDelayInMs: 100, maxRetryDelayInMs: 1_000 },
    });
    this.#container = service.getContainerClient(options.container);
    this.#credential = new StorageSharedKeyCredential(accountName, accountKey);
    this.#protocol = this.#container.url.startsWith("https:") ? SASProtocol.Https : SASProtocol.HttpsAndHttp;
    // Idle keep-alive sockets are unref'd by Node, so they never hold the
    // process open at shutdown.
    const secure = this.#container.url.startsWith("https:");
    this.#agent = secure ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
    this.#request = secure ? https.request : http.request;
  }

  #sign(path: string, permissions: BlobSASPermissions, expiresOn: Date): string {
    const sas = generateBlobSASQueryParameters(
      { containerName: this.#container.containerName, blobName: path, permissions, expiresOn, protocol: this.#protocol },
      this.#credential,
    );
    return `${this.#container.getBlobClient(path).url}?${sas.toString()}`;
  }

  signUploadUrl(path: string, expiresOn: Date): string {
    return this.#sign(path, uploadPermissions, expiresOn);
  }

  signDownloadUrl(path: string, expiresOn: Date): string {
    return this.#sign(path, downloadPermissions, expiresOn);
  }

  /**
   * Runs one store call bounded by the store's timeout and the caller's
   * signal. A call the caller gave up on rejects with the caller's reason
   * (its deadline), anything else that fails as BlobStoreUnavailableError.
   */
  async #call<T>(what: string, run: (signal: AbortSignal) => Promise<T>, caller?: AbortSignal): Promise<T> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    try {
      return await run(caller === undefined ? timeout : AbortSignal.any([caller, timeout]));
    } catch (error) {
      if (caller?.aborted === true) throw caller.reason;
      throw new BlobStoreUnavailableError(`blob store: ${what} failed`, { cause: error });
    }
  }

  /** Creates the container when it is missing; run once at start-up. */
  async ensureContainer(): Promise<void> {
    await this.#call("create container", (abortSignal) => this.#container.createIfNotExists({ abortSignal }));
  }

  /**
   * Every confirm checks its blob, so this one call skips the SDK's request
   * pipeline (its policies and header deserialisation were about a fifth of
   * a confirm's CPU): a HEAD with Node's HTTP client on a read SAS signed
   * here, retried as the SDK retries, on network errors and 5xx answers.
   */
  async stat(path: string, caller?: AbortSignal): Promise<BlobStat | undefined> {
    return this.#call("get properties", async (signal) => {
      let resigned = false;
      for (let attempt = 1; ; attempt++) {
        let res: { status: number; headers: http.IncomingHttpHeaders } | undefined;
        let failure: unknown;
        try {
          res = await this.#head(path, signal);
        } catch (error) {
          failure = error;
        }
        if (res?.status === 404) return undefined;
        // Refused: perhaps the reused SAS (a clock that jumped); sign anew, once.
        if (res?.status === 403 && !resigned) {
          resigned = true;
          this.#readSas = undefined;
          attempt--;
          continue;
        }
        if (res?.status === 200) {
          const md5 = res.headers["content-md5"];
          return {
            size: Number(res.headers["content-length"] ?? 0),
            lastModified: new Date(res.headers["last-modified"] ?? 0),
            md5: typeof md5 === "string" && md5 !== "" ? md5 : undefined,
            etag: String(res.headers["etag"] ?? ""),
          };
        }
        const retryable = res === undefined ? !signal.aborted : res.status >= 500;
        if (!retryable || attempt >= 3) throw failure ?? new Error(`blob HEAD answered HTTP ${res!.status}`);
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      }
    }, caller);
  }

  /**
   * Copy Blob From URL (synchronous, same account; up to 256 MiB): the
   * source is named by a short read SAS signed here, the copy is refused
   * when the source's ETag is no longer `ifMatch` (412) and when the
   * destination exists (If-None-Match: *, 409), so a final blob is written
   * once and never again.
   */
  async copyOnce(source: string, destination: string, ifMatch: string | undefined, caller?: AbortSignal): Promise<CopyOutcome> {
    const sourceUrl = this.#sign(source, downloadPermissions, new Date(this.#now() + copySourceSasMs));
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
   * A read SAS for the whole container, for the blob checks: signed once
   * and reused for 10 minutes (or until the clock goes back, or the store
   * refuses it), rather than signed per blob on every confirm. It never
   * leaves this process.
   */
  #readQuery(): string {
    const now = this.#now();
    const sas = this.#readSas;
    if (sas === undefined || now >= sas.signedAt + readSasUseMs || now < sas.signedAt) {
      const query = generateBlobSASQueryParameters(
        { containerName: this.#container.containerName, permissions: containerReadPermissions, expiresOn: new Date(now + readSasLifetimeMs), protocol: this.#protocol },
        this.#credential,
      ).toString();
      this.#readSas = { query, signedAt: now };
      return query;
    }
    return sas.query;
  }

  #head(path: string, signal: AbortSignal): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
    const url = `${this.#container.getBlobClient(path).url}?${this.#readQuery()}`;
    return new Promise((resolve, reject) => {
      const req = this.#request(url, { method: "HEAD", agent: this.#agent, signal }, (res) => {
        res.on("error", reject);
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
        res.resume();
      });
      req.on("error", reject);
      req.end();
    });
  }

  async deleteIfExists(path: string, caller?: AbortSignal): Promise<void> {
    await this.#call("delete", (abortSignal) => this.#container.getBlobClient(path).deleteIfExists({ abortSignal }), caller);
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

import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import { BlobClient, BlockBlobClient, type StoragePipelineOptions } from "@azure/storage-blob";
import { CliError } from "./cli-error.js";
import { ProgressBar } from "./progress-bar.js";
import { unsignedUrl } from "./unsigned-url.js";

/**
 * Retries of each blob request by the SDK (exponential, from 1 s): a
 * dropped connection mid-upload costs a block, not the push. Its
 * tryTimeoutInMs is the store's own timeout (a `timeout` query parameter),
 * which a store that has stopped answering never keeps: `stallMs` is ours.
 */
const retryOptions: StoragePipelineOptions["retryOptions"] = { maxTries: 5, retryDelayInMs: 1000, maxRetryDelayInMs: 15_000, tryTimeoutInMs: 120_000 };

/** How long a transfer may move no byte, nor be answered, before it is given up on. */
const defaultStallMs = 120_000;

/**
 * The slowest link a block upload is allowed for: the SDK reports a block
 * upload's progress only once a whole block is in, so a round of blocks in
 * flight gets the time it takes at this rate on top of the stall time.
 */
const slowestUploadBytesPerSecond = 32 * 1024;

/** What a test may change: how long a transfer may stall. */
export interface TransferOptions {
  readonly stallMs?: number;
}

/**
 * Aborts a transfer that has moved no byte for `ms`: without it, a store
 * that accepts a connection and then says nothing holds the command for
 * ever (the SDK has no client-side timeout).
 */
class StallWatch {
  readonly #controller = new AbortController();
  readonly #ms: number;
  #timer: NodeJS.Timeout;
  #stalled = false;
  #stopped = false;

  constructor(ms: number, onStall: () => void = () => undefined) {
    this.#ms = ms;
    const stall = () => {
      this.#stalled = true;
      this.#controller.abort();
      onStall();
    };
    // Never what keeps the process alive: a transfer's own sockets do, while it runs.
    this.#timer = setTimeout(stall, ms).unref();
    this.moved = () => {
      // After the end too: the SDK's other block uploads report on after one failed.
      if (this.#stalled || this.#stopped) return;
      clearTimeout(this.#timer);
      this.#timer = setTimeout(stall, ms).unref();
    };
  }

  /** Says that bytes moved: the wait starts again. */
  readonly moved: () => void;

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The error to report once it has stalled; undefined while it has not. */
  error(what: string, url: string): CliError | undefined {
    if (!this.#stalled) return undefined;
    return new CliError(
      `${what} ${unsignedUrl(url)} failed: the blob store at ${storeAddress(url)} moved no byte and gave no answer for ${this.#ms / 1000} s (it accepted the connection, then stopped answering): run the command again; if it keeps stalling, the store is unwell, or a proxy or firewall between holds the connection: for the embedded Azurite of \`npm start\`, restart the service`,
      "BLOB_TRANSFER_FAILED",
    );
  }

  /**
   * Ends the watch, and whatever of the transfer still runs: the SDK fails
   * an upload at its first failed block and leaves the others in flight,
   * whose sockets would keep the process alive for as long as the store
   * holds them.
   */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#controller.abort();
  }
}
/** Packages above this go up in blocks, several at once, each retried alone. */
const maxSingleShotBytes = 8 * 1024 * 1024;
const blockBytes = 4 * 1024 * 1024;
const concurrency = 4;

/**
 * Failures to connect at all: the store the signed URL names is not
 * reachable from here. A connection cut later (ECONNRESET) is not one: the
 * store was reached.
 */
const unreachableCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT"]);

/**
 * A failed upload or download as the CLI reports it: the URL without its
 * signature (a credential), the store's status and message, and what to
 * do, for a refused URL (403), a download of a package the store does not
 * hold (404), for a store failing (5xx, whose message is
 * often empty) and for a store not reachable at all, the usual case of a
 * service with the embedded Azurite called from another machine: the
 * service hands out URLs of a store only it can reach.
 */
export function transferError(what: string, url: string, error: unknown): CliError {
  const status = (error as { statusCode?: unknown }).statusCode;
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? (error.message.split("\n")[0] ?? "").trim() : String(error);
  const detail = message === "" ? "" : `: ${message}`;
  const hint =
    status === 403
      ? " (the signed URL was refused: it may have expired; run the command again for a fresh one)"
      : status === 404 && what === "download from"
        ? " (the blob store does not hold this version's package: it was lost (the service warns of such versions when it starts on its embedded Azurite) or removed behind the service; tell its operator, or delete the version (entity-versions delete) and push it again)"
        : typeof status === "number" && status >= 500
          ? " (the blob store failed, after retries: run the command again later; if it keeps failing, the store is unwell: for the embedded Azurite of `npm start`, restart the service)"
          : status === undefined && typeof code === "string" && unreachableCodes.has(code)
            ? ` (the blob store at ${storeAddress(url)} named in the service's signed URL is not reachable from this machine; the embedded Azurite of \`npm start\` listens on 127.0.0.1 only: run the CLI on the service's machine, or give the service a store it can reach (AZURE_STORAGE_CONNECTION_STRING))`
            : "";
  const err = new CliError(`${what} ${unsignedUrl(url)} failed${status === undefined ? "" : ` with HTTP ${String(status)}`}${detail}${hint}`, "BLOB_TRANSFER_FAILED");
  err.cause = error;
  return err;
}

/** The host and port of a blob URL (the port spelled out, as a firewall rule or a listen address names it); never its query. */
function storeAddress(url: string): string {
  const u = new URL(url);
  return `${u.hostname}:${u.port === "" ? (u.protocol === "https:" ? "443" : "80") : u.port}`;
}

/**
 * Uploads a file to a signed upload URL with @azure/storage-blob: one
 * request for small files, blocks in parallel for large ones, each request
 * retried by the SDK; a progress bar on a terminal (none with `json`, the
 * command's --json). Content-Type is
 * application/octet-stream as the service asks, and the blob's Content-MD5
 * is set to the file's, so every later download can be checked against it
 * (Azure computes none itself for a block upload).
 */
export async function uploadFile(url: string, file: string, sizeBytes: number, md5Base64: string, label: string, json: boolean, options: TransferOptions = {}): Promise<void> {
  const bar = new ProgressBar(label, sizeBytes, json);
  const stallMs = options.stallMs ?? defaultStallMs;
  const blocksInFlightBytes = sizeBytes > maxSingleShotBytes ? Math.min(sizeBytes, concurrency * blockBytes) : 0;
  const watch = new StallWatch(stallMs + Math.ceil((blocksInFlightBytes / slowestUploadBytesPerSecond) * 1000));
  try {
    await new BlockBlobClient(url, undefined, { retryOptions }).uploadFile(file, {
      blockSize: blockBytes,
      maxSingleShotSize: maxSingleShotBytes,
      concurrency,
      blobHTTPHeaders: { blobContentType: "application/octet-stream", blobContentMD5: Buffer.from(md5Base64, "base64") },
      abortSignal: watch.signal,
      onProgress: (p) => {
        watch.moved();
        bar.update(p.loadedBytes);
      },
    });
  } catch (error) {
    throw watch.error("upload to", url) ?? transferError("upload to", url, error);
  } finally {
    watch.stop();
    bar.done();
  }
}

/** What a download wrote and what the blob store said about it. */
export interface DownloadResult {
  readonly sizeBytes: number;
  readonly md5Base64: string;
  /** The blob's Content-MD5, base64, when the store reported one. */
  readonly reportedMd5Base64: string | undefined;
}

/** Feeds bytes to an MD5 and counts them on their way to the file. */
class Md5Meter extends Transform {
  bytes = 0;
  readonly md5 = createHash("md5");
  constructor(
    private readonly bar: ProgressBar,
    private readonly moved: () => void,
  ) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.moved();
    this.bytes += chunk.length;
    this.md5.update(chunk);
    this.bar.update(this.bytes);
    done(null, chunk);
  }
}

/**
 * Downloads a signed download URL to `file` (which the caller renames into
 * place once it is verified), computing its MD5 on the way. The SDK resumes
 * a stream that breaks off, from where it broke off.
 */
export async function downloadFile(url: string, file: string, expectedBytes: number, label: string, json: boolean, options: TransferOptions = {}): Promise<DownloadResult> {
  const bar = new ProgressBar(label, expectedBytes, json);
  // A body that stops mid-way is no error to the SDK's resuming stream: the pipeline is ended here.
  const meter: Md5Meter = new Md5Meter(bar, () => watch.moved());
  let piped = false;
  const watch = new StallWatch(options.stallMs ?? defaultStallMs, () => {
    if (piped) meter.destroy(new Error("the download stalled"));
  });
  try {
    const res = await new BlobClient(url, undefined, { retryOptions }).download(0, undefined, { maxRetryRequests: 5, abortSignal: watch.signal });
    if (res.readableStreamBody === undefined) throw new Error("the blob store answered without a body");
    watch.moved();
    piped = true;
    await pipeline(res.readableStreamBody, meter, createWriteStream(file));
    // Content-MD5 on a whole-blob read; x-ms-blob-content-md5 where the store answers a read as a range.
    const md5 = res.contentMD5 ?? res.blobContentMD5;
    const reported = md5 === undefined ? undefined : Buffer.from(md5).toString("base64");
    return { sizeBytes: meter.bytes, md5Base64: meter.md5.digest("base64"), reportedMd5Base64: reported };
  } catch (error) {
    // A file this machine cannot write (permissions, a full disk) is not the
    // blob store's failure: passed on as it is, the CLI reports it as the
    // system's error, naming what and where.
    const system = error as NodeJS.ErrnoException;
    if (error instanceof Error && typeof system.syscall === "string" && typeof system.path === "string") throw error;
    throw watch.error("download from", url) ?? transferError("download from", url, error);
  } finally {
    watch.stop();
    bar.done();
  }
}

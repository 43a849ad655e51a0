import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { pino } from "pino";
import { EntityVersionsServiceImpl } from "./api/entity-versions-service.js";
import { PageTokens } from "./api/page-token.js";
import { anonymousAuthenticator, type Authenticator } from "./auth/caller.js";
import { AzureBlobStore } from "./blob/azure-blob-store.js";
import { type EmbeddedAzurite, startEmbeddedAzurite } from "./blob/embedded-azurite.js";
import { type Clock, systemClock } from "./clock.js";
import type { Config } from "./config.js";
import { BlobDeleter } from "./jobs/blob-deleter.js";
import { buildServer } from "./server.js";
import { openDatabase } from "./store/database.js";
import { migrateLatest } from "./store/migrate.js";
import { UploadStore } from "./store/upload-store.js";
import { VersionStore } from "./store/version-store.js";

/** The running service: its HTTP server (not yet listening) and how to stop everything. */
export interface App {
  readonly server: FastifyInstance;
  /** The embedded Azurite's blob endpoint, when the service runs one. */
  readonly blobEndpoint: string | undefined;
  /** Stops the server, the background jobs, the database pool and the embedded Azurite. */
  close(): Promise<void>;
}

/** Parts a caller may replace (tests pin the clock, a logger, an authenticator). */
export interface AppOverrides {
  readonly clock?: Clock;
  readonly logger?: FastifyBaseLogger;
  readonly authenticator?: Authenticator;
}

/** Reads a secret from a file under the data folder, creating it on first use. */
function localSecret(file: string): Buffer {
  try {
    return Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
  } catch {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const secret = randomBytes(32);
    fs.writeFileSync(file, secret.toString("base64"), { mode: 0o600, flag: "wx" });
    return secret;
  }
}

/**
 * Wires the service from its configuration: the embedded Azurite when no
 * Azure connection string is set, the blob container, the database and its
 * migrations, the background blob deleter and the HTTP server.
 */
export async function createApp(config: Config, overrides: AppOverrides = {}): Promise<App> {
  const clock = overrides.clock ?? systemClock;
  const logger =
    overrides.logger ??
    pino({ level: config.logLevel, redact: { paths: ["req.headers.authorization", "*.authorization"], censor: "[redacted]" } });
  const cleanups: Array<() => Promise<unknown>> = [];
  const closeAll = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  };
  try {
    let azurite: EmbeddedAzurite | undefined;
    let connectionString: string;
    if (config.blob.kind === "embedded-azurite") {
      azurite = await startEmbeddedAzurite({ location: config.blob.location, port: config.blob.port });
      cleanups.push(() => azurite!.stop());
      connectionString = azurite.connectionString;
    } else {
      connectionString = config.blob.connectionString;
    }
    const blobs = new AzureBlobStore({ connectionString, container: config.blob.container, timeoutMs: config.blobTimeoutMs });
    await blobs.ensureContainer();

    const db = openDatabase(config.database);
    cleanups.push(() => db.knex.destroy());
    await migrateLatest(db.knex);

    const deleter = new BlobDeleter(new UploadStore(db), blobs, clock, logger);
    const server = await buildServer({
      versions: new EntityVersionsServiceImpl({
        store: new VersionStore(db),
        blobs,
        deleter,
        clock,
        pageTokens: new PageTokens(
          config.pageTokenSecret === undefined
            ? localSecret(path.join(config.dataDir, "page-token-secret"))
            : Buffer.from(config.pageTokenSecret),
        ),
        settings: {
          uploadUrlTtlSeconds: config.uploadUrlTtlSeconds,
          downloadUrlTtlSeconds: config.downloadUrlTtlSeconds,
          limits: config.limits,
        },
      }),
      authenticator: overrides.authenticator ?? anonymousAuthenticator,
      logger,
      bodyLimitBytes: config.limits.maxRequestBytes,
      shutdownTimeoutMs: config.shutdownTimeoutMs,
    });
    deleter.start(config.blobDeletionIntervalMs);
    cleanups.push(() => deleter.stop());
    cleanups.push(() => server.close());
    return {
      server,
      blobEndpoint: azurite?.blobEndpoint,
      close: closeAll,
    };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

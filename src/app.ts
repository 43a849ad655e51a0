import fs from "node:fs";
import path from "node:path";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { pino } from "pino";
import { EntityAccessServiceImpl } from "./api/entity-access-service.js";
import { EntityVersionsServiceImpl } from "./api/entity-versions-service.js";
import { PageTokens } from "./api/page-token.js";
import type { Authenticator } from "./auth/caller.js";
import { JwtAuthenticator } from "./auth/jwt-authenticator.js";
import { adminRole, publisherRole } from "./auth/policy.js";
import { mintToken } from "./auth/tokens.js";
import { AzureBlobStore } from "./blob/azure-blob-store.js";
import { type EmbeddedAzurite, startEmbeddedAzurite } from "./blob/embedded-azurite.js";
import { type Clock, systemClock } from "./clock.js";
import type { Config } from "./config.js";
import { BlobDeleter } from "./jobs/blob-deleter.js";
import { localSecret } from "./local-secret.js";
import { buildServer } from "./server.js";
import { openDatabase } from "./store/database.js";
import { AccessStore } from "./store/access-store.js";
import { migrateLatest } from "./store/migrate.js";
import { UploadStore } from "./store/upload-store.js";
import { VersionStore } from "./store/version-store.js";

/** The running service: its HTTP server (not yet listening) and how to stop everything. */
export interface App {
  readonly server: FastifyInstance;
  /** The embedded Azurite's blob endpoint, when the service runs one. */
  readonly blobEndpoint: string | undefined;
  /** In development auth mode: a token for user `dev` (publisher, admin), also written to dataDir/dev-token. */
  readonly devToken: string | undefined;
  /** Stops the server, the background jobs, the database pool and the embedded Azurite. */
  close(): Promise<void>;
}

/** Parts a caller may replace (tests pin the clock, a logger, an authenticator). */
export interface AppOverrides {
  readonly clock?: Clock;
  readonly logger?: FastifyBaseLogger;
  readonly authenticator?: Authenticator;
}

/** Lifetime of the development token. */
const devTokenTtlSeconds = 30 * 24 * 3600;

/**
 * The authenticator of the configuration. In development mode it signs with
 * a secret kept under dataDir and mints a token for user `dev`.
 */
async function authentication(config: Config): Promise<{ authenticator: Authenticator; devToken: string | undefined }> {
  const { auth } = config;
  if (auth.mode === "jwt") return { authenticator: new JwtAuthenticator(auth), devToken: undefined };
  const secret = localSecret(path.join(config.dataDir, "auth-dev-secret")).toString("base64");
  const devToken = await mintToken(secret, {
    sub: "dev",
    roles: [publisherRole, adminRole],
    ttlSeconds: devTokenTtlSeconds,
    ...(auth.issuer === undefined ? {} : { issuer: auth.issuer }),
    ...(auth.audience === undefined ? {} : { audience: auth.audience }),
  });
  fs.writeFileSync(path.join(config.dataDir, "dev-token"), `${devToken}\n`, { mode: 0o600 });
  return { authenticator: new JwtAuthenticator({ ...auth, secret }), devToken };
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

    const { authenticator, devToken } = await authentication(config);
    const access = new AccessStore(db);
    const deleter = new BlobDeleter(new UploadStore(db), blobs, clock, logger);
    const server = await buildServer({
      access: new EntityAccessServiceImpl({ access, clock }),
      versions: new EntityVersionsServiceImpl({
        store: new VersionStore(db),
        access,
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
      authenticator: overrides.authenticator ?? authenticator,
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
      devToken,
      close: closeAll,
    };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

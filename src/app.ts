import fs from "node:fs";
import path from "node:path";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { EntityAccessServiceImpl } from "./api/entity-access-service.js";
import { EntityEventsServiceImpl } from "./api/entity-events-service.js";
import { EntityVersionsServiceImpl } from "./api/entity-versions-service.js";
import { PageTokens } from "./api/page-token.js";
import type { Authenticator } from "./auth/caller.js";
import { JwtAuthenticator, type KeySetLogger } from "./auth/jwt-authenticator.js";
import { adminRole, publisherRole } from "./auth/policy.js";
import { mintToken } from "./auth/tokens.js";
import { AzureBlobStore } from "./blob/azure-blob-store.js";
import { claimContainer } from "./blob/container-claim.js";
import type { BlobStore } from "./blob/blob-store.js";
import { type EmbeddedAzurite, startEmbeddedAzurite } from "./blob/embedded-azurite.js";
import { type LostPackage, lostPackages } from "./blob/lost-packages.js";
import { type Clock, systemClock } from "./clock.js";
import { type Config, ConfigError } from "./config.js";
import { EventHub } from "./events/event-hub.js";
import { BlobDeleter } from "./jobs/blob-deleter.js";
import { OrphanSweeper } from "./jobs/sweeper.js";
import { devTokensSigned, localSecret } from "./local-secret.js";
import { isLoopbackHost } from "./net/loopback.js";
import type { OnePortServer } from "./net/one-port-server.js";
import { lockDataDir } from "./ops/data-dir-lock.js";
import { createLogger } from "./ops/logger.js";
import { Metrics, type PoolStats } from "./ops/metrics.js";
import { type MetricsListener, metricsListener } from "./ops/metrics-endpoint.js";
import { openFileLimit, openFileLimitProblem } from "./ops/open-file-limit.js";
import { Readiness } from "./ops/readiness.js";
import { sharedReading } from "./ops/shared-reading.js";
import { untilAborted } from "./store/abandon.js";
import { buildServer } from "./server.js";
import { AccessStore } from "./store/access-store.js";
import { checkDatabase, openDatabase } from "./store/database.js";
import { EventStore } from "./store/event-store.js";
import { databaseIdentity, migrateLatest, type RecordedPackage, recordedPackages, somePackagePaths } from "./store/migrate.js";
import { UploadStore } from "./store/upload-store.js";
import { VersionStore } from "./store/version-store.js";

/** The running service: its HTTP server (not yet listening) and how to stop everything. */
export interface App {
  readonly server: FastifyInstance;
  readonly metrics: Metrics;
  /** `GET /metrics`'s own listener, when METRICS_PORT is set (not yet listening). */
  readonly metricsPort: MetricsListener | undefined;
  readonly sweeper: OrphanSweeper;
  /** The event watches this process serves. */
  readonly watches: EventHub;
  /** The embedded Azurite's blob endpoint, when the service runs one. */
  readonly blobEndpoint: string | undefined;
  /** In development auth mode: a token for user `dev` (publisher, admin), also written to dataDir/dev-token. */
  readonly devToken: string | undefined;
  /**
   * Settles with why the service must stop by itself: its data directory
   * (embedded defaults) was deleted or taken over under it, or the
   * embedded Azurite exited. Never settles otherwise.
   */
  readonly fatal: Promise<string>;
  /**
   * Graceful stop: reports not ready, stops the background jobs, ends
   * every event watch (SHUTTING_DOWN, naming where each can resume), stops
   * accepting and lets requests in flight finish (cut off after
   * shutdownTimeoutMs), then closes the database pool and the embedded
   * Azurite.
   */
  close(): Promise<void>;
}

/** Parts a caller may replace (tests pin the clock, a logger, an authenticator, or wrap the blob store to inject faults), and main's stop during start-up. */
export interface AppOverrides {
  readonly blobStore?: (store: BlobStore) => BlobStore;
  readonly clock?: Clock;
  readonly logger?: FastifyBaseLogger;
  readonly authenticator?: Authenticator;
  /**
   * Aborted when the process is asked to stop while it starts: the
   * migrations stop between two of them (never leaving their lock held)
   * and createApp rejects with the signal's reason.
   */
  readonly startStop?: AbortSignal;
}

/** How often a claimed data directory is checked for still being there. */
const dataDirCheckMs = 2_000;

/**
 * The most versions an embedded start checks for lost packages, and half
 * the most blobs it lists (a package and a lockfile each): development
 * data; past either, none are checked. The start waits for the listing,
 * which Azurite serves slowly: the bound keeps that wait short.
 */
const lostPackageCheckMax = 1_000;

/** Lifetime of the development token. */
const devTokenTtlSeconds = 30 * 24 * 3600;

/**
 * The authenticator of the configuration. In development mode it signs with
 * a secret kept under dataDir and mints a token for user `dev`.
 */
async function authentication(config: Config, logger: KeySetLogger & { info(obj: object, msg: string): void }, holdsDataDir: boolean): Promise<{ authenticator: Authenticator; devToken: string | undefined }> {
  const { auth } = config;
  if (auth.mode === "jwt") {
    // A development token an earlier start left is one this service
    // refuses, and the command line reads it first: it would be told its
    // signature does not verify, by the very service that wrote it. Only
    // where this process holds DATA_DIR: no other start there uses it.
    const left = path.join(config.dataDir, "dev-token");
    if (holdsDataDir && fs.existsSync(left)) {
      fs.rmSync(left, { force: true });
      logger.info({ path: left }, "removed the development token an earlier start without AUTH_JWT_SECRET or AUTH_JWKS_URL left: this service accepts only tokens its signer issues");
    }
    return { authenticator: new JwtAuthenticator(auth, logger), devToken: undefined };
  }
  const secret = localSecret(path.join(config.dataDir, "auth-dev-secret"), devTokensSigned).toString("base64");
  const devToken = await mintToken(secret, {
    sub: "dev",
    roles: [publisherRole, adminRole],
    // Never longer than the service itself accepts.
    ttlSeconds: Math.min(devTokenTtlSeconds, auth.maxTokenLifetimeSeconds ?? devTokenTtlSeconds),
    ...(auth.issuer === undefined ? {} : { issuer: auth.issuer }),
    ...(auth.audience === undefined ? {} : { audience: auth.audience }),
  });
  fs.writeFileSync(path.join(config.dataDir, "dev-token"), `${devToken}\n`, { mode: 0o600 });
  return { authenticator: new JwtAuthenticator({ ...auth, secret }, logger), devToken };
}

/**
 * Wires the service from its configuration: the embedded Azurite when no
 * Azure connection string is set, the blob container, the database and its
 * migrations, the background jobs and the HTTP server.
 */
export async function createApp(config: Config, overrides: AppOverrides = {}): Promise<App> {
  const clock = overrides.clock ?? systemClock;
  const logger = overrides.logger ?? createLogger(config.logLevel);
  for (const notice of config.notices) logger.warn({}, notice);
  const stops: Array<() => Promise<unknown>> = [];
  let closing = false;
  const stopAll = async () => {
    closing = true;
    for (const stop of stops.reverse()) await stop().catch((error: unknown) => logger.error({ err: error }, "shutdown step failed"));
  };
  try {
    const files = openFileLimitProblem(openFileLimit(), config.http.maxConnections, config.database.kind === "mysql" ? config.database.poolMax : 1);
    if (files !== undefined) {
      // Production refuses it, as it refuses other weak settings; elsewhere it is said once.
      if (config.production) throw new ConfigError(files);
      logger.warn({}, files);
    }
    // The embedded defaults serve one process: a second one on the same files is refused before it touches them.
    const dataDirLock = config.database.kind === "sqlite" || config.blob.kind === "embedded-azurite" ? lockDataDir(config.dataDir) : undefined;
    if (dataDirLock !== undefined) stops.push(async () => dataDirLock.release());
    // A data directory deleted under the service (rm -rf data): SQLite and
    // Azurite would answer on from files no longer there, every write lost
    // at the next start, and a second service could claim the folder.
    let mustStop: (why: string) => void = () => undefined;
    const fatal = new Promise<string>((resolve) => (mustStop = resolve));
    if (dataDirLock !== undefined) {
      const timer = setInterval(() => {
        const why = dataDirLock.lost();
        if (why === undefined) return;
        clearInterval(timer);
        mustStop(why);
      }, dataDirCheckMs);
      timer.unref();
      stops.push(async () => clearInterval(timer));
    }
    let azurite: EmbeddedAzurite | undefined;
    let connectionString: string;
    if (config.blob.kind === "embedded-azurite") {
      azurite = await startEmbeddedAzurite({ location: config.blob.location, port: config.blob.port });
      stops.push(() => azurite!.stop());
      // Once the service closes, the emulator's exit is its own doing, not a failure.
      void azurite.exited.then((why) => closing || mustStop(why));
      connectionString = azurite.connectionString;
      if (!isLoopbackHost(config.host)) {
        logger.warn(
          { host: config.host },
          "HOST lets other machines call the API, but the embedded Azurite listens on 127.0.0.1 and the upload and download URLs point there: they work on this machine only. Set AZURE_STORAGE_CONNECTION_STRING to a blob store the clients can reach.",
        );
      }
    } else {
      connectionString = config.blob.connectionString;
    }
    const azure = new AzureBlobStore({ connectionString, container: config.blob.container, timeoutMs: config.blobTimeoutMs });
    await azure.ensureContainer();
    const blobs: BlobStore = overrides.blobStore?.(azure) ?? azure;

    // Read before the migrations: a container that already records this
    // database needs none of its package paths looked up.
    const recordedOwner = await azure.recordedOwner();

    // Migrations on connections of their own, with no bound on a
    // statement's time or a connection's silence: a schema change or a
    // measuring pass over a large table takes as long as it takes.
    const migrator = openDatabase(config.database, logger, { migrations: true });
    let databaseId: string;
    let ownPackages: string[];
    let recorded: RecordedPackage[] | undefined;
    try {
      await migrateLatest(migrator.knex, undefined, (message) => logger.warn({}, message), overrides.startStop);
      databaseId = await databaseIdentity(migrator.knex);
      ownPackages = recordedOwner?.databaseId === databaseId ? [] : await somePackagePaths(migrator.knex);
      if (azurite !== undefined) recorded = await recordedPackages(migrator.knex, lostPackageCheckMax);
    } finally {
      await migrator.knex.destroy();
    }
    // Before the sweeper first runs: a second database on this container
    // would take the first one's packages for strays and delete them.
    await claimContainer(azure, config, logger, { databaseId, recorded: recordedOwner, ownPackages });
    // Only the embedded emulator loses blobs it has acknowledged (see
    // warnOfLostPackages); a configured store is not checked.
    if (azurite !== undefined) await warnOfLostPackages(azure, recorded, logger);
    const db = openDatabase(config.database, logger);
    // Knex waits for every connection in use to come back; one waiting on a
    // server gone silent comes back only when its socket gives up. The
    // process is stopping: after a second, it stops waiting.
    stops.push(() => Promise.race([db.knex.destroy(), new Promise((resolve) => setTimeout(resolve, 1_000).unref())]));

    const uploads = new UploadStore(db);
    const events = new EventStore(db);
    const hub = new EventHub(events, {
      ...config.watch,
      maxWatches: config.watch.maxPerProcess,
      maxWatchesPerCaller: config.watch.maxPerCaller,
      onPollError: (error) => logger.error({ err: error }, "reading new events for watches failed; retrying every poll interval"),
      onPollRecovered: () => logger.info("reading new events for watches works again"),
      onGap: (entityId, afterSeq, nextSeq) =>
        logger.warn(
          { entityId, afterEventId: String(afterSeq), nextEventId: String(nextSeq) },
          "events were deleted before this replica read them (EVENT_RETENTION_DAYS shorter than its lag, or rows removed by hand): watches that needed them end with EVENTS_EXPIRED",
        ),
    });
    // Changes made here reach this process's watches at once; other replicas' within a poll interval.
    const onEventsRecorded = (entityIds: readonly string[]) => hub.recorded(entityIds);
    const access = new AccessStore(db, { onEventsRecorded, maxEntries: config.limits.maxAccessEntries });
    const metrics = new Metrics({
      pool: () => (db.knex.client as { pool?: PoolStats }).pool,
      // Scrapes need no token: however many come, one count per interval.
      // A count that never answers (a partitioned network) gives up, so the next scrape reads again.
      pendingDeletions: sharedReading(() => untilAborted(uploads.pendingCount(), AbortSignal.timeout(5_000)), 15_000),
      watches: () => hub.size,
    });
    const readiness = new Readiness([
      { name: "database", check: () => checkDatabase(db) },
      { name: "blob_store", check: () => blobs.ping() },
      ...(dataDirLock === undefined
        ? []
        : [
            {
              name: "data_dir",
              check: async () => {
                if (dataDirLock.lost() !== undefined) throw Object.assign(new Error("the data directory was deleted or taken over"), { code: "DATA_DIR_LOST" });
              },
            },
          ]),
    ]);
    const deleter = new BlobDeleter(uploads, blobs, clock, logger, metrics);
    const sweeper = new OrphanSweeper(uploads, blobs, deleter, clock, logger, {
      graceMs: config.orphanGraceSeconds * 1000,
      intervalMs: config.sweepIntervalSeconds * 1000,
      deleteUnrecordedPackages: config.sweepUnrecordedPackages,
      eventRetentionMs: config.eventRetentionDays === 0 ? undefined : config.eventRetentionDays * 24 * 3600 * 1000,
      onSweep: (result, error) => {
        metrics.sweeps.inc({ result: error === undefined ? "ok" : "error" });
        metrics.swept.inc({ kind: "abandoned_upload" }, result.abandonedUploads);
        metrics.swept.inc({ kind: "stray_blob" }, result.strayBlobs);
        metrics.swept.inc({ kind: "event" }, result.prunedEvents);
      },
    }, events);
    const { authenticator, devToken } = await authentication(config, logger, dataDirLock !== undefined);
    const pageTokenSecret =
      config.pageTokenSecret === undefined ? localSecret(path.join(config.dataDir, "page-token-secret"), "page tokens (the page_token of listings under way)") : Buffer.from(config.pageTokenSecret);
    const previousPageTokenSecrets = config.pageTokenSecretPrevious === undefined ? [] : [Buffer.from(config.pageTokenSecretPrevious)];
    /** When the stop below began: the server's bound on calls in flight counts from it. */
    let shutdownBegan: number | undefined;
    const server = await buildServer({
      access: new EntityAccessServiceImpl({ access, clock }),
      events: new EntityEventsServiceImpl({ events, access, hub, pageTokens: new PageTokens(pageTokenSecret, "events", previousPageTokenSecrets) }),
      versions: new EntityVersionsServiceImpl({
        store: new VersionStore(db, {
          onReadBatch: (reads) => metrics.dbReadBatch.observe(reads),
          onConfirmGroup: (size, recorded) => {
            metrics.dbConfirmGroup.observe(size);
            metrics.dbConfirmsGrouped.inc(recorded);
          },
          onEventsRecorded,
          pageMaxBytes: config.limits.maxPageBytes,
        }),
        access,
        blobs,
        deleter,
        clock,
        pageTokens: new PageTokens(pageTokenSecret, "", previousPageTokenSecrets),
        settings: {
          uploadUrlTtlSeconds: config.uploadUrlTtlSeconds,
          downloadUrlTtlSeconds: config.downloadUrlTtlSeconds,
          copiesInTurn: config.confirmCopiesInTurn,
          maxOpenUploadsPerEntity: config.limits.maxOpenUploadsPerEntity,
          limits: config.limits,
        },
      }),
      authenticator: overrides.authenticator ?? authenticator,
      readiness,
      metrics,
      logger,
      bodyLimitBytes: config.limits.maxRequestBytes,
      http: config.http,
      shutdownTimeoutMs: config.shutdownTimeoutMs,
      shutdownBegan: () => shutdownBegan,
      metricsOnApiPort: config.metricsPort === undefined,
      rpcInflationScope: config.rpcInflationScope,
    });
    const metricsPort = config.metricsPort === undefined ? undefined : metricsListener(metrics, config.http.responseTimeoutMs);
    if (metricsPort !== undefined) stops.push(() => metricsPort.close());
    let jobsStopped: Promise<unknown> = Promise.resolve();
    stops.push(async () => {
      // Watches never finish by themselves: they are ended first, while
      // their connections are still open to carry where each can resume.
      // One bound for both steps: a watch whose read waits on a slow
      // database must not give the calls after it a second
      // SHUTDOWN_TIMEOUT_MS (the stop must stay within the grace period
      // the README tells to set).
      shutdownBegan = Date.now();
      await hub.close(config.shutdownTimeoutMs);
      // At the bound, calls still running are answered SHUTTING_DOWN (the
      // server's shutdown signal); a moment later, whatever is still open is cut.
      const force = setTimeout(
        () => (server.server as { closeAllConnections?: () => void }).closeAllConnections?.(),
        Math.max(0, shutdownBegan + config.shutdownTimeoutMs - Date.now()) + 1_000,
      );
      await server.close();
      clearTimeout(force);
      await jobsStopped;
    });
    deleter.start(config.blobDeletionIntervalMs);
    sweeper.start();
    // Asked to stop before the server closes, and waited for after it has:
    // a pass on a slow blob store holds neither the port nor its callers.
    stops.push(async () => void (jobsStopped = Promise.all([deleter.stop(), sweeper.stop()])));
    stops.push(async () => {
      readiness.shutDown();
      // Not ready, still serving: new requests keep coming until the load
      // balancer has seen it. Persistent connections are moved off meanwhile,
      // or a pooling proxy or an L4 balancer would go on using them until the close.
      if (config.shutdownDrainMs > 0) {
        (server.server as unknown as OnePortServer).drain();
        await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
      }
    });
    return { server, metrics, metricsPort, sweeper, watches: hub, blobEndpoint: azurite?.blobEndpoint, devToken, fatal, close: stopAll };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/** How many lost versions the warning names in its message (all are in its fields). */
const lostNamedMax = 20;

/**
 * Azurite keeps its index of blobs in memory and saves it every 5 s and
 * when stopped: a SIGKILL of the emulator (the out-of-memory killer, a
 * container's processes killed together) loses the blobs written in the
 * seconds before, the packages of versions the database has confirmed
 * among them. Their downloads would answer 404 with nothing said; the
 * start says it once, naming each. Development data only: more than
 * lostPackageCheckMax versions (recorded undefined) are not checked.
 */
async function warnOfLostPackages(store: BlobStore, recorded: readonly RecordedPackage[] | undefined, logger: FastifyBaseLogger): Promise<void> {
  let lost: LostPackage[] | undefined;
  try {
    lost = recorded === undefined ? undefined : await lostPackages(store, recorded, 2 * lostPackageCheckMax);
  } catch (error) {
    logger.warn({ err: error }, "could not check the embedded Azurite for the packages of the recorded versions");
    return;
  }
  if (lost === undefined) {
    logger.info({ atMost: lostPackageCheckMax }, "more versions than a start checks: the embedded Azurite was not checked for lost packages");
    return;
  }
  if (lost.length === 0) return;
  const named = lost
    .slice(0, lostNamedMax)
    .map((v) => `entity ${v.entityId} version ${v.version} (id ${v.versionId}): its ${v.missing.join(" and ")}`)
    .join("; ");
  const more = lost.length > lostNamedMax ? `; and ${lost.length - lostNamedMax} more (all in "lost")` : "";
  logger.warn(
    { lost },
    `the embedded Azurite does not hold the blobs of ${lost.length} version(s) the database records: ${named}${more}. ` +
      "It saves its index of blobs every 5 s and when stopped, so it was most likely killed (SIGKILL: the out-of-memory killer, a container's processes killed together) within 5 s of their confirm. " +
      "Their downloads answer 404: delete each (entity-versions delete ENTITY VERSION_ID; an active one after activating another) and push it again.",
  );
}

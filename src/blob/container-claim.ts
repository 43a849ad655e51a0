import path from "node:path";
import type { FastifyBaseLogger } from "fastify";
import { type Config, ConfigError } from "../config.js";
import type { AzureBlobStore, ContainerOwner } from "./azure-blob-store.js";
import { areaPrefixes, type BlobArea, parseUploadPath } from "./blob-paths.js";
import { connectionStringPart } from "./connection-string.js";

/** Blobs a refusal counts under the service's areas before it says "at least": a count, not a listing of a large container. */
const countedBlobsMax = 1_000;

const allAreas: ReadonlySet<BlobArea> = new Set(["staging", "final", "legacy"]);
/** Where versions' packages are: a database without versions holds none there. */
const versionAreas: ReadonlySet<BlobArea> = new Set(["final", "legacy"]);

/** What a start knows when it claims the blob container: see claimContainer. */
export interface ClaimFacts {
  /** This database's id (migration 0011). */
  readonly databaseId: string;
  /** The owner the container recorded before this start's migrations; undefined: none. */
  readonly recorded: ContainerOwner | undefined;
  /** A few of this database's package paths (somePackagePaths); none: it has no versions. */
  readonly ownPackages: readonly string[];
}

/**
 * Makes the blob container this database's before the sweeper first runs,
 * or refuses the start (ConfigError, exit 2) where going on would lose
 * packages or hide that they are lost:
 * - a container that records another database and holds packages, none
 *   of them this one's: each database's sweeper would take the other's
 *   packages for strays and delete them;
 * - a database with versions on a container that holds none of their
 *   packages and records no owner, or holds no packages at all: most likely a connection string or
 *   container name that points at another store than the one that holds
 *   them, where every download would answer 404 with nothing said; unless
 *   CLAIM_EMPTY_CONTAINER names the container and it is empty (the
 *   packages are lost, and the operator says so);
 * - a database without versions on a container that records no owner and
 *   holds versions' packages: another database's, filled before
 *   containers recorded their owner, which its sweeper would delete.
 * A container that holds this database's packages is claimed for it, also
 * when it records another id (a database restored from a backup taken
 * before it had one, which got a new one) or none (filled by a release
 * before owner records). One that holds no packages at all is claimed for
 * a database without versions, whatever it records, only on the embedded
 * Azurite (a development database deleted to start over, its emulator's
 * folder kept: the DATA_DIR lock proves no other service uses it) or when
 * CLAIM_EMPTY_CONTAINER names it: on a configured store another service
 * may share the container and not have pushed yet.
 */
export async function claimContainer(store: AzureBlobStore, config: Config, logger: FastifyBaseLogger, facts: ClaimFacts): Promise<void> {
  const { databaseId, ownPackages } = facts;
  if (facts.recorded?.databaseId === databaseId) return;
  const holdsOwn = ownPackages.length > 0 && (await anyExists(store, ownPackages));
  let owner = facts.recorded;
  if (owner === undefined) {
    if (ownPackages.length > 0 && !holdsOwn) {
      const held = await countPackages(store);
      if (held > 0 || !config.blob.claimEmpty) throw new ConfigError(noneOfItsPackages(store, config, held, ownPackages.length));
      logger.warn(
        { container: config.blob.container, databaseId },
        "CLAIM_EMPTY_CONTAINER: the blob container holds none of this database's packages and is claimed for it; its versions answer downloads with 404 until each is deleted and pushed again (unset CLAIM_EMPTY_CONTAINER now: the container records this database)",
      );
    }
    if (ownPackages.length === 0) {
      // A database without versions owns no version's package: those held
      // here are another database's (one whose service started before
      // containers recorded their owner, or whose record was deleted), and
      // this one's sweeper would delete them as strays. Staged uploads
      // alone may be its own (issued, not yet confirmed): they do not count.
      const held = await countPackages(store, versionAreas);
      if (held > 0) throw new ConfigError(unrecordedPackages(config, held));
    }
    // Claimed, or the database that claimed it since it was read.
    owner = await store.claimFor(databaseId);
    if (owner.databaseId === databaseId) return;
  }
  if (holdsOwn) {
    logger.warn({ container: config.blob.container, recorded: owner.databaseId, databaseId }, "the blob container recorded another database id, but holds this database's packages: it is claimed for this one");
    owner = await store.reclaimFor(databaseId, owner.databaseId);
    if (owner.databaseId === databaseId) return;
  }
  const held = await countPackages(store);
  if (held === 0) {
    // It holds none of the other database's packages yet. With the
    // embedded Azurite, the DATA_DIR lock proves no other service uses the
    // emulator's folder: a development database deleted to start over, its
    // folder kept. A configured store may be shared by a running service
    // that has not pushed yet, whose packages this one's sweeper would
    // delete: only CLAIM_EMPTY_CONTAINER takes it over.
    if (ownPackages.length > 0 && !config.blob.claimEmpty) throw new ConfigError(noneOfItsPackages(store, config, held, ownPackages.length, owner));
    if (ownPackages.length === 0 && config.blob.kind !== "embedded-azurite" && !config.blob.claimEmpty) throw new ConfigError(anotherDatabase(config, owner, held, false));
    logger.warn(
      { container: config.blob.container, recorded: owner.databaseId, databaseId },
      ownPackages.length > 0
        ? "CLAIM_EMPTY_CONTAINER: the blob container recorded another database and holds no packages; it is claimed for this one, whose versions answer downloads with 404 until each is deleted and pushed again (unset CLAIM_EMPTY_CONTAINER now)"
        : config.blob.kind === "embedded-azurite"
          ? "the blob container recorded another database, but holds no packages: it is claimed for this one"
          : "CLAIM_EMPTY_CONTAINER: the blob container recorded another database, but holds no packages: it is claimed for this one (unset CLAIM_EMPTY_CONTAINER now)",
    );
    owner = await store.reclaimFor(databaseId, owner.databaseId);
    if (owner.databaseId === databaseId) return;
  }
  // A database with versions, none of whose packages is here: most likely
  // settings that name another's container, not one to share or replace.
  throw new ConfigError(ownPackages.length > 0 && !holdsOwn ? noneOfItsPackages(store, config, held, ownPackages.length, owner) : anotherDatabase(config, owner, held, ownPackages.length > 0));
}

/** The refusal of a container that holds another database's packages (or may be given some). */
function anotherDatabase(config: Config, owner: ContainerOwner, held: number, hasVersions: boolean): string {
  const embedded = config.blob.kind === "embedded-azurite";
  const holds = held === 0 ? "" : `: ${heldText(held)} of packages, under ${areaPrefixes.staging}, ${areaPrefixes.final} or the legacy {entity}/{upload}/`;
  // A development database deleted (or moved) to start over leaves its packages behind in the emulator's folder.
  const startOver =
    embedded && !hasVersions
      ? ` To start over instead, delete the packages left there by the database that recorded it: the folder ${config.blob.location} (the embedded Azurite's), or the whole DATA_DIR (${config.dataDir}).`
      : "";
  // Another service on it may not have pushed yet: only the operator knows that database is gone.
  const notYet =
    held === 0 && !embedded
      ? ` It holds no packages yet, but that database's service may push some at any time. If that database is gone for good, start this one once with CLAIM_EMPTY_CONTAINER=${config.blob.container}.`
      : "";
  return (
    `the blob container "${config.blob.container}" holds another database's packages (database ${owner.databaseId}, since ${owner.claimedAt}${holds}), and two databases on one container delete each other's packages (each one's sweeper takes the other's for strays): give this database its own container with AZURE_STORAGE_CONTAINER${
      embedded ? `, or its own DATA_DIR (and with it its own embedded Azurite), e.g. DATA_DIR=${otherDataDir(config)}` : ""
    }.${startOver}${notYet}`
  );
}

/** The refusal, for a database without versions, of a container that records no owner and holds versions' packages. */
function unrecordedPackages(config: Config, held: number): string {
  const embedded = config.blob.kind === "embedded-azurite";
  const startOver = embedded
    ? ` To start over instead, delete the packages left there: the folder ${config.blob.location} (the embedded Azurite's), or the whole DATA_DIR (${config.dataDir}).`
    : ` If that database is gone for good and its packages are not wanted, delete them (under ${areaPrefixes.final}, ${areaPrefixes.staging} and the legacy {entity}/{upload}/): this database then claims the container.`;
  const database = config.database.kind === "mysql" ? "DATABASE_URL" : `${config.database.setting ?? "DATABASE_URL"} (the SQLite file ${config.database.file})`;
  return (
    `the blob container "${config.blob.container}" records no owner but holds ${heldText(held)} of versions' packages (under ${areaPrefixes.final} or the legacy {entity}/{upload}/), while this database has no versions: ` +
    `they are another database's (one whose service started before containers recorded their owner), and this database's sweeper would delete them as strays. ` +
    `If this database is to serve them, check ${database}: it most likely names another database than the one that holds their versions. ` +
    `Otherwise give this database its own container with AZURE_STORAGE_CONTAINER${embedded ? `, or its own DATA_DIR (and with it its own embedded Azurite), e.g. DATA_DIR=${otherDataDir(config)}` : ""}.${startOver}`
  );
}

/** A data folder to suggest for a database of its own: never the one in use. */
function otherDataDir(config: Config): string {
  const suggested = `./data-${config.database.kind}`;
  return path.resolve(suggested) === path.resolve(config.dataDir) ? `${suggested}-2` : suggested;
}

/** The refusal of a database with versions on a container that holds none of their packages. */
function noneOfItsPackages(store: AzureBlobStore, config: Config, held: number, checked: number, owner?: ContainerOwner): string {
  const { container } = config.blob;
  const where = config.blob.kind === "azure" ? `at ${store.url}` : `the embedded Azurite's, in ${config.blob.location}`;
  const recorded = owner === undefined ? "" : `, though it records database ${owner.databaseId} (since ${owner.claimedAt})`;
  const holds =
    held === 0
      ? `it holds no packages at all${recorded}`
      : `it holds ${heldText(held)} of packages, under ${areaPrefixes.staging}, ${areaPrefixes.final} or the legacy {entity}/{upload}/, none of them this database's${owner === undefined ? "" : `, and it records database ${owner.databaseId} (since ${owner.claimedAt}) as their owner`}`;
  const database = config.database.kind === "mysql" ? "DATABASE_URL" : `${config.database.setting ?? "DATABASE_URL"} (the SQLite file ${config.database.file})`;
  const storeSettings =
    config.blob.kind === "azure"
      ? `AZURE_STORAGE_CONNECTION_STRING (its account is "${connectionStringPart(config.blob.connectionString, "AccountName") ?? ""}") and AZURE_STORAGE_CONTAINER`
      : `DATA_DIR (the embedded Azurite keeps the packages in ${config.blob.location}: a database file moved without that folder, or that folder deleted, leaves them behind) and AZURE_STORAGE_CONTAINER`;
  const way =
    held === 0
      ? ` If those packages are lost and this database is to go on without them (each of its versions then answers downloads with 404 until it is deleted and pushed again), start it once with CLAIM_EMPTY_CONTAINER=${container}.`
      : " Its sweeper would also delete those other packages as strays: this container cannot be claimed for this database.";
  return (
    `the blob container "${container}" (${where}) holds none of this database's packages: ${holds}, while the database records versions (${checked === 1 ? "its one version's package is not there" : `none of the ${checked} checked, entities' newest and active versions among them, is there`}), and started on it, every version's download would answer 404. ` +
    `Check ${storeSettings}, and ${database}: they most likely name another store, or another database, than the one that holds this database's packages.${way}`
  );
}

function heldText(held: number): string {
  return held >= countedBlobsMax ? `at least ${countedBlobsMax} blobs` : `${held} blob${held === 1 ? "" : "s"}`;
}

/**
 * How many package blobs the container holds, counted up to
 * countedBlobsMax: under the service's areas (uploads/, versions/) and in
 * the legacy layout ({entity}/{upload}/…, versions confirmed before the
 * staging area existed), or a container holding only old packages would
 * look empty.
 */
async function countPackages(store: AzureBlobStore, areas: ReadonlySet<BlobArea> = allAreas): Promise<number> {
  let held = 0;
  for await (const blob of store.list("")) {
    const area = parseUploadPath(blob.name)?.area;
    if (area !== undefined && areas.has(area) && ++held >= countedBlobsMax) return held;
  }
  return held;
}

/** Whether the store holds at least one of these blobs. */
async function anyExists(store: AzureBlobStore, paths: readonly string[]): Promise<boolean> {
  for (const path of paths) if ((await store.stat(path)) !== undefined) return true;
  return false;
}

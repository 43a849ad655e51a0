import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

/** Pool statistics Knex's pool (tarn) reports. */
export interface PoolStats {
  numUsed(): number;
  numFree(): number;
  numPendingAcquires(): number;
}

/**
 * The service's Prometheus metrics, in a registry of its own (several
 * servers can live in one process, as in the tests). Served at GET /metrics.
 */
export class Metrics {
  readonly registry = new Registry();

  readonly rpcRequests = new Counter({
    name: "entity_versions_rpc_requests_total",
    help: "RPCs handled, by RPC (service/method), protocol and status code.",
    labelNames: ["rpc", "protocol", "code"] as const,
    registers: [this.registry],
  });

  readonly rpcDuration = new Histogram({
    name: "entity_versions_rpc_duration_seconds",
    help: "RPC latency inside the service (interceptors and handler), by RPC and status code.",
    labelNames: ["rpc", "code"] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });

  readonly staleBase = new Counter({
    name: "entity_versions_stale_base_total",
    help: "Pushes refused with STALE_BASE (push protection), by RPC.",
    labelNames: ["rpc"] as const,
    registers: [this.registry],
  });

  readonly sweeps = new Counter({
    name: "entity_versions_sweeper_runs_total",
    help: "Orphan sweeps, by result (ok, error).",
    labelNames: ["result"] as const,
    registers: [this.registry],
  });

  readonly swept = new Counter({
    name: "entity_versions_sweeper_swept_total",
    help: "What the sweeper removed: abandoned uploads (queued for deletion), stray blobs and events past EVENT_RETENTION_DAYS (deleted).",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });

  readonly blobDeletions = new Counter({
    name: "entity_versions_blob_deletions_total",
    help: "Upload blob deletions attempted, by result (ok, error).",
    labelNames: ["result"] as const,
    registers: [this.registry],
  });

  readonly dbReadBatch = new Histogram({
    name: "entity_versions_db_read_batch_size",
    help: "Single-entity reads sent to the database together in one statement (DATABASE_READ_BATCH_MAX caps it).",
    buckets: [1, 2, 4, 8, 16, 32, 64],
    registers: [this.registry],
  });

  readonly dbConfirmGroup = new Histogram({
    name: "entity_versions_db_confirm_group_size",
    help: "Confirms on different entities sent to the database in one transaction (DATABASE_CONFIRM_GROUP_MAX caps it).",
    buckets: [2, 4, 8, 16, 32, 64],
    registers: [this.registry],
  });

  readonly dbConfirmsGrouped = new Counter({
    name: "entity_versions_db_confirms_grouped_total",
    help: "Confirms a group's transaction recorded; the rest of each group was decided one transaction per confirm.",
    registers: [this.registry],
  });

  /** Counts and times one RPC. */
  recordRpc(rpc: string, protocol: string, code: string, seconds: number): void {
    this.rpcRequests.inc({ rpc, protocol, code });
    this.rpcDuration.observe({ rpc, code }, seconds);
  }

  constructor(options: { pool?: () => PoolStats | undefined; pendingDeletions?: () => Promise<number>; watches?: () => number } = {}) {
    collectDefaultMetrics({ register: this.registry, prefix: "entity_versions_" });
    const { pool, pendingDeletions, watches } = options;
    new Gauge({
      name: "entity_versions_watches_open",
      help: "Event watches (WatchEvents) this process serves now; WATCH_MAX_PER_PROCESS caps them.",
      registers: [this.registry],
      collect() {
        if (watches !== undefined) this.set(watches());
      },
    });
    new Gauge({
      name: "entity_versions_db_pool_connections",
      help: "Database pool connections by state: used, free, and acquires waiting for one.",
      labelNames: ["state"] as const,
      registers: [this.registry],
      collect() {
        const stats = pool?.();
        if (stats === undefined) return;
        this.set({ state: "used" }, stats.numUsed());
        this.set({ state: "free" }, stats.numFree());
        this.set({ state: "pending" }, stats.numPendingAcquires());
      },
    });
    new Gauge({
      name: "entity_versions_blob_deletions_pending",
      help: "Uploads whose blobs are queued for deletion (deleted versions, swept uploads), counted up to 100000 and at most 15 s old.",
      registers: [this.registry],
      async collect() {
        if (pendingDeletions === undefined) return;
        try {
          this.set(await pendingDeletions());
        } catch {
          // Database down: keep the last value; readiness reports the outage.
        }
      },
    });
  }
}

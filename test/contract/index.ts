import type { Backend } from "../support/env.js";
import { PrivateMariaDb } from "../support/private-mariadb.js";
import { authKeysSuite, authSuite } from "./auth.js";
import { authMatrixSuite } from "./auth-matrix.js";
import { concurrencySuite } from "./concurrency.js";
import { confirmGroupsSuite } from "./confirm-groups.js";
import { deadlinesSuite } from "./deadlines.js";
import { deleteSuite } from "./delete.js";
import { eventsSuite } from "./events.js";
import { faultsSuite } from "./faults.js";
import { fuzzSuite } from "./fuzz.js";
import { logsSuite, opsSuite } from "./ops.js";
import { openapiCoverageSuite, openapiSuite } from "./openapi.js";
import { openapiClientSuite } from "./openapi-client.js";
import { grpcSuite } from "./grpc.js";
import { protocolsSuite } from "./protocols.js";
import { pushSuite } from "./push.js";
import { queryPlansSuite } from "./query-plans.js";
import { readsSuite } from "./reads.js";
import { shutdownSuite } from "./shutdown.js";
import { sweeperSuite } from "./sweeper.js";
import { watchReplicasSuite, watchSuite } from "./watch.js";

/**
 * Registers every contract suite for one backend. `CONTRACT=deadlines,push`
 * (names of the suites' files) runs only those, for a quicker loop while
 * developing; the OpenAPI coverage check, which needs every suite, is then
 * left out.
 */
export function defineContract(backend: Backend): void {
  const suites: Record<string, ((backend: Backend) => { run(): void }) | undefined> = {
    push: pushSuite,
    reads: readsSuite,
    delete: deleteSuite,
    grpc: grpcSuite,
    protocols: protocolsSuite,
    concurrency: concurrencySuite,
    "confirm-groups": confirmGroupsSuite,
    events: eventsSuite,
    watch: watchSuite,
    "watch-replicas": backend === "mysql" ? () => watchReplicasSuite() : undefined,
    faults: faultsSuite,
    auth: authSuite,
    "auth-matrix": authMatrixSuite,
    "auth-keys": authKeysSuite,
    ops: opsSuite,
    logs: logsSuite,
    fuzz: fuzzSuite,
    sweeper: sweeperSuite,
    shutdown: shutdownSuite,
    openapi: openapiSuite,
    "openapi-client": openapiClientSuite,
    // MariaDB's ANALYZE reports what each statement read; production runs on MySQL.
    "query-plans": backend === "mysql" ? () => queryPlansSuite() : undefined,
    deadlines: backend === "mysql" && PrivateMariaDb.available() ? () => deadlinesSuite() : undefined,
  };
  const only = process.env["CONTRACT"]?.split(",").filter((n) => n !== "");
  for (const [name, define] of Object.entries(suites)) if (define !== undefined && (only === undefined || only.includes(name))) define(backend).run();
  if (only === undefined) openapiCoverageSuite(backend).run();
}

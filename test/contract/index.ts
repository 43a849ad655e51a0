import type { Backend } from "../support/env.js";
import { authKeysSuite, authSuite } from "./auth.js";
import { authMatrixSuite } from "./auth-matrix.js";
import { concurrencySuite } from "./concurrency.js";
import { confirmGroupsSuite } from "./confirm-groups.js";
import { deleteSuite } from "./delete.js";
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

/** Registers every contract suite for one backend. */
export function defineContract(backend: Backend): void {
  for (const define of [pushSuite, readsSuite, deleteSuite, grpcSuite, protocolsSuite, concurrencySuite, confirmGroupsSuite, faultsSuite, authSuite, authMatrixSuite, authKeysSuite, opsSuite, logsSuite, fuzzSuite, sweeperSuite, shutdownSuite, openapiSuite, openapiClientSuite, openapiCoverageSuite]) define(backend).run();
  // MariaDB's ANALYZE reports what each statement read; production runs on MySQL.
  if (backend === "mysql") queryPlansSuite().run();
}

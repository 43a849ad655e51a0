import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type Backend, inCi } from "../support/env.js";
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
    // A MariaDB server of its own, frozen and thawed.
    deadlines: backend === "mysql" ? () => (PrivateMariaDb.available() ? deadlinesSuite() : leftOutSuite("mysql: deadlines (every test of the suite)")) : undefined,
  };
  const only = process.env["CONTRACT"]?.split(",").filter((n) => n !== "");
  for (const [name, define] of Object.entries(suites)) if (define !== undefined && (only === undefined || only.includes(name))) define(backend).run();
  if (only === undefined) openapiCoverageSuite(backend).run();
  if (backend === "mysql") reportLeftOut();
}

function leftOutSuite(name: string): { run(): void } {
  PrivateMariaDb.leaveOut(name);
  return { run: () => undefined };
}

/**
 * Names every suite and test the chosen MySQL suites left out for want of
 * the MariaDB server binaries (they start a server of their own): a loud
 * line outside CI, a failure in CI, where a skipped test proves nothing.
 */
function reportLeftOut(): void {
  const names = PrivateMariaDb.leftOut();
  if (names.length === 0) return;
  const list = names.map((n) => `\n!!   - ${n}`).join("");
  const missing = `mariadbd / mariadb-install-db not found (install mariadb-server): ${names.length} MySQL suite(s)/test(s) need a MariaDB server of their own`;
  if (inCi) {
    const s = suite("mysql: tests that need the MariaDB server binaries");
    s("mariadbd and mariadb-install-db are installed", () => {
      assert.unreachable(`CI is set and ${missing}:${list}`);
    });
    s.run();
    return;
  }
  const line = "!".repeat(78);
  console.error(`\n${line}\n!! ${missing}; SKIPPING them:${list}\n!! CI requires them.\n${line}\n`);
}

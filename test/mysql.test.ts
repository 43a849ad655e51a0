// The contract suites on MySQL (MariaDB). Outside CI an unreachable MySQL
// skips them with a loud line; in CI it fails the run.
import { mysqlAvailable } from "./support/env.js";
import { defineContract } from "./contract/index.js";

if (await mysqlAvailable()) defineContract("mysql");

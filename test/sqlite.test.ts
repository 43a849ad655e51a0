// The same contract suites on SQLite, the embedded default.
import { defineContract } from "./contract/index.js";

defineContract("sqlite");

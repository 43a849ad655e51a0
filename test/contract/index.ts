import type { Backend } from "../support/env.js";
import { pushSuite } from "./push.js";

/** Registers every contract suite for one backend. */
export function defineContract(backend: Backend): void {
  for (const define of [pushSuite]) define(backend).run();
}

import { suite, type Test } from "uvu";
import type { Backend } from "./env.js";
import { startService, type TestService } from "./service.js";

/** State of a suite that runs against one service. */
export interface ServiceContext {
  svc: TestService;
}

/**
 * A uvu suite with a fresh service (and database) on the backend, started
 * before its tests and stopped after. A failure to start is printed by
 * test/run.ts, as every before() hook's is.
 */
export function serviceSuite(name: string, backend: Backend, env?: Record<string, string>): Test<ServiceContext> {
  const s = suite<ServiceContext>(`${backend}: ${name}`, {} as ServiceContext);
  s.before(async (ctx) => {
    ctx.svc = await startService(backend, env === undefined ? {} : { env });
  });
  s.after(async (ctx) => {
    await ctx.svc?.close();
  });
  return s;
}

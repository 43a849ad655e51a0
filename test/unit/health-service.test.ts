import { getEventListeners } from "node:events";
import { Code, ConnectError, createHandlerContext } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { EntityVersionsService } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { HealthService } from "../../src/ops/health-service.js";
import { Readiness } from "../../src/ops/readiness.js";
import { apiError, reasonOf } from "../../src/errors/api-error.js";

/** A health Watch's HandlerContext, as Connect's handler makes it, ending with `requestSignal`. */
function watchContext(requestSignal: AbortSignal) {
  return createHandlerContext({
    service: Health,
    method: Health.method.watch,
    protocolName: "grpc",
    requestMethod: "POST",
    url: "http://localhost/grpc.health.v1.Health/Watch",
    requestSignal,
  });
}

/** The code of the ConnectError a watch's step failed with; undefined when it did not fail. */
async function codeOf(step: Promise<unknown>): Promise<Code | undefined> {
  try {
    await step;
    return undefined;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    return error.code;
  }
}

test("a long health Watch holds one abort listener, however many intervals it waits", async () => {
  const health = new HealthService(new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 }), [EntityVersionsService], { watchIntervalMs: 1 });
  const requestSignal = new AbortController();
  const ctx = watchContext(requestSignal.signal);
  // Connect's own (the context's linked signals).
  const connects = getEventListeners(ctx.signal, "abort").length;
  const watch = health.watch({ service: "" } as Parameters<HealthService["watch"]>[0], ctx);
  assert.is((await watch.next()).value?.status, 1, "SERVING");
  const pending = watch.next();
  // About 50 intervals of 1 ms.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const listeners = getEventListeners(ctx.signal, "abort").length - connects;
  assert.ok(listeners <= 1, `${listeners} abort listeners of the watch's`);
  requestSignal.abort();
  assert.is(await codeOf(pending), Code.Canceled, "the watch ends with its call, never with OK");
  assert.ok(getEventListeners(ctx.signal, "abort").length <= connects, "none left by the watch");
});

test("a Watch of an unknown service sends SERVICE_UNKNOWN and stays open until its call ends", async () => {
  const health = new HealthService(new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 }), [EntityVersionsService]);
  const requestSignal = new AbortController();
  const ctx = watchContext(requestSignal.signal);
  const watch = health.watch({ service: "nope.Service" } as Parameters<HealthService["watch"]>[0], ctx);
  assert.is((await watch.next()).value?.status, 3, "SERVICE_UNKNOWN");
  let settled = false;
  const pending = watch.next().finally(() => (settled = true));
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.is(settled, false, "the watch is still open");
  requestSignal.abort();
  assert.is(await codeOf(pending), Code.Canceled, "the watch ends with its call");
});

test("a Watch ends with why it ended, never OK: DEADLINE_EXCEEDED at the client's deadline, the server's reason when it stops", async () => {
  const health = new HealthService(new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 }), [EntityVersionsService], { watchIntervalMs: 5 });
  for (const reason of [new ConnectError("the operation timed out", Code.DeadlineExceeded), new ConnectError("shutting down", Code.Unavailable)]) {
    const requestSignal = new AbortController();
    const watch = health.watch({ service: "" } as Parameters<HealthService["watch"]>[0], watchContext(requestSignal.signal));
    assert.is((await watch.next()).value?.status, 1, "SERVING");
    const pending = watch.next();
    requestSignal.abort(reason);
    assert.is(await codeOf(pending), reason.code, reason.message);
  }
});


test("a Check of a service not served is NOT_FOUND with the catalog's ErrorInfo, as every other error", async () => {
  const health = new HealthService(new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 }), [EntityVersionsService]);
  const error = await health.check({ service: "nope.Svc" } as Parameters<HealthService["check"]>[0]).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ConnectError, String(error));
  assert.is(error.code, Code.NotFound);
  assert.is(reasonOf(error), "HEALTH_SERVICE_UNKNOWN");
  assert.match(error.rawMessage, 'No service "nope.Svc"');
});

/** What `step` settled with, or a failed assertion when it has not within `ms`: a watch left open would otherwise hang the test. */
function within<T>(step: Promise<T>, ms = 2_000): Promise<T> {
  return Promise.race([step, new Promise<never>((_, reject) => setTimeout(() => reject(new assert.Assertion({ message: `not settled within ${ms} ms`, operator: "within", expects: "settled", actual: "pending" })), ms).unref())]);
}

test("shutdown's start wakes a Watch: NOT_SERVING at once, not at the next interval", async () => {
  const readiness = new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 });
  const health = new HealthService(readiness, [EntityVersionsService], { watchIntervalMs: 60_000 });
  const requestSignal = new AbortController();
  const watch = health.watch({ service: "" } as Parameters<HealthService["watch"]>[0], watchContext(requestSignal.signal));
  assert.is((await watch.next()).value?.status, 1, "SERVING");
  const pending = watch.next();
  // Seen by within(); ended by the abort below when the test fails first.
  pending.catch(() => undefined);
  readiness.shutDown();
  try {
    assert.equal((await within(pending)).value, { status: 2 }, "NOT_SERVING");
  } finally {
    requestSignal.abort();
  }
});

test("when the server closes, every Watch sends NOT_SERVING (if not yet sent) and ends SHUTTING_DOWN at once, however long its interval", async () => {
  const closing = new AbortController();
  const health = new HealthService(new Readiness([{ name: "database", check: async () => undefined }], { cacheMs: 0 }), [EntityVersionsService], {
    watchIntervalMs: 60_000,
    closing: closing.signal,
  });
  const calls: AbortController[] = [];
  const open = (service: string) => {
    calls.push(new AbortController());
    return health.watch({ service } as Parameters<HealthService["watch"]>[0], watchContext(calls.at(-1)!.signal));
  };
  try {
    const served = open("");
    const unknown = open("nope.Service");
    assert.is((await served.next()).value?.status, 1, "SERVING");
    assert.is((await unknown.next()).value?.status, 3, "SERVICE_UNKNOWN");
    const [pendingServed, pendingUnknown] = [served.next(), unknown.next()];
    for (const step of [pendingServed, pendingUnknown]) step.catch(() => undefined);
    closing.abort(apiError("SHUTTING_DOWN", {}));
    // Readiness still says ready (shutDown not called): the server's close is what counts.
    assert.equal((await within(pendingServed)).value, { status: 2 }, "NOT_SERVING before the end");
    for (const step of [served.next(), pendingUnknown]) {
      const error = await within(step).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof ConnectError, String(error));
      assert.is(error.code, Code.Unavailable);
      assert.is(reasonOf(error), "SHUTTING_DOWN");
    }
    // One opened once closing has begun is answered and ended at once too.
    const late = open("");
    assert.equal((await within(late.next())).value, { status: 2 }, "NOT_SERVING");
    assert.is(await codeOf(within(late.next())), Code.Unavailable);
  } finally {
    for (const call of calls) call.abort();
  }
});

test.run();

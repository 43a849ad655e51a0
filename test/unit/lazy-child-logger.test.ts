import { Writable } from "node:stream";
import type { FastifyBaseLogger } from "fastify";
import { pino } from "pino";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { lazyChildLoggerFactory } from "../../src/ops/lazy-child-logger.js";

function capture(level: string) {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const line of String(chunk).split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  const logger = pino({ level }, stream);
  let children = 0;
  // Counts children made; pino's children inherit child() from it, so `this` is kept.
  const real = logger as unknown as { child: (this: unknown, ...args: unknown[]) => unknown };
  const child = real.child;
  real.child = function (this: unknown, ...args: unknown[]) {
    children++;
    return child.apply(this, args);
  };
  return { logger: logger as unknown as FastifyBaseLogger, lines, children: () => children };
}

test("a request's logger binds its id to what is written through it, as pino's child does", async () => {
  const { logger, lines } = capture("info");
  const log = lazyChildLoggerFactory(logger, { reqId: "r-1" }, {});
  log.error({ rpc: "x" }, "failed");
  log.info("second");
  await new Promise((r) => setImmediate(r));
  assert.equal(
    lines.map((l) => [l["reqId"], l["msg"], l["rpc"]]),
    [
      ["r-1", "failed", "x"],
      ["r-1", "second", undefined],
    ],
  );
});

test("no child is made until something at or above the level is written", () => {
  const { logger, children } = capture("info");
  const log = lazyChildLoggerFactory(logger, { reqId: "r-2" }, {});
  log.debug("below the level");
  log.trace("below the level");
  assert.is(children(), 0);
  assert.is(log.level, "info");
  const levels = log as unknown as { isLevelEnabled(level: string): boolean };
  assert.is(levels.isLevelEnabled("debug"), false);
  assert.is(levels.isLevelEnabled("warn"), true);
  assert.is(children(), 0);
  log.warn("now");
  log.warn("again");
  assert.is(children(), 1);
});

test("a child of the request's logger carries both bindings", async () => {
  const { logger, lines } = capture("info");
  lazyChildLoggerFactory(logger, { reqId: "r-3" }, {}).child({ part: "blob" }).info("nested");
  await new Promise((r) => setImmediate(r));
  assert.is(lines[0]?.["reqId"], "r-3");
  assert.is(lines[0]?.["part"], "blob");
});

test("a route's own log level is kept", async () => {
  const { logger, lines } = capture("info");
  const log = lazyChildLoggerFactory(logger, { reqId: "r-4" }, { level: "debug" });
  log.debug("shown at the route's level");
  await new Promise((r) => setImmediate(r));
  assert.is(lines[0]?.["msg"], "shown at the route's level");
  assert.is(lines[0]?.["reqId"], "r-4");
});

test.run();

// A compressed request message is charged to its call's share of the body
// budget as it inflates, on real zlib and the real budget.
import zlib, { brotliCompressSync, gzipSync } from "node:zlib";
import { ConnectError, Code } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { BodyBudget } from "../../src/http/body-budget.js";
import { reasonOf } from "../../src/errors/api-error.js";
import { chargedCompressions, chargingInflationTo, type InflationCharge } from "../../src/rpc/charged-inflation.js";

const mib = 1024 * 1024;
const connection = {};

/** A logger that keeps what it is told at error level. */
function errorLog(): { error(obj: object, msg: string): void; told: string[] } {
  const told: string[] = [];
  return { error: (_obj, msg) => void told.push(msg), told };
}
const [compressionGzipCharged, compressionBrotliCharged] = chargedCompressions(errorLog());

async function refusal(run: () => Promise<unknown>): Promise<ConnectError> {
  const error = await run().then(() => undefined, (e: unknown) => e);
  assert.instance(error, ConnectError);
  return error as ConnectError;
}

for (const [compression, pack] of [
  [compressionGzipCharged, gzipSync],
  [compressionBrotliCharged, brotliCompressSync],
] as const) {
  test(`${compression.name}: a message is charged what it inflates to, held until the call ends`, async () => {
    const budget = new BodyBudget({ perConnection: 4 * mib, total: 64 * mib });
    const ticket = budget.open(connection);
    const message = Buffer.alloc(3 * mib, 7);
    const out = await chargingInflationTo({ ticket }, () => compression.decompress(pack(message), 4 * mib));
    assert.ok(Buffer.from(out).equals(message));
    const other = budget.open(connection);
    assert.equal(other.take(mib + 1), { scope: "connection", limitBytes: 4 * mib }, "3 MiB of the connection's 4 are held");
    assert.is(other.take(mib), undefined);
    ticket.close();
    other.close();
    assert.is(budget.open(connection).take(4 * mib), undefined, "given back when the call ends");
  });

  test(`${compression.name}: past the budget it is refused IN_FLIGHT_BYTES_EXCEEDED, past readMaxBytes RESOURCE_EXHAUSTED; a small one is charged its size`, async () => {
    const budget = new BodyBudget({ perConnection: 2 * mib, total: 64 * mib });
    const bomb = pack(Buffer.alloc(3 * mib));
    const charge: InflationCharge = { ticket: budget.open(connection) };
    const overBudget = await refusal(() => chargingInflationTo(charge, () => compression.decompress(bomb, 4 * mib)));
    assert.is(overBudget.code, Code.ResourceExhausted);
    assert.match(overBudget.message, /request bodies are in flight on this connection/);
    assert.is(charge.refusal, overBudget, "noted for the call's log line");
    charge.ticket.close();
    const limited = { ticket: budget.open(connection) };
    const overLimit = await refusal(() => chargingInflationTo(limited, () => compression.decompress(bomb, mib)));
    limited.ticket.close();
    assert.is(overLimit.code, Code.ResourceExhausted);
    assert.match(overLimit.message, /larger than configured readMaxBytes 1048576/);
    const small = { ticket: budget.open(connection) };
    await chargingInflationTo(small, () => compression.decompress(pack(Buffer.from("hello")), mib));
    assert.is(budget.open(connection).take(2 * mib - 5), undefined, "only the 5 inflated bytes are held (and the bytes refused above were given back)");
  });

  test(`${compression.name}: a call that ends while its message inflates (cancelled) stops it, and holds nothing after`, async () => {
    const budget = new BodyBudget({ perConnection: 8 * mib, total: 8 * mib });
    const bomb = pack(Buffer.alloc(4 * mib));
    for (let call = 0; call < 5; call++) {
      const ticket = budget.open(connection);
      const inflating = chargingInflationTo({ ticket }, () => compression.decompress(bomb, 8 * mib));
      setImmediate(() => ticket.close());
      await inflating.then(
        () => undefined,
        () => undefined,
      );
      assert.ok(ticket.take(1) !== undefined, "a closed ticket takes nothing");
    }
    assert.is(budget.open(connection).take(8 * mib), undefined, "every byte given back");
  });

  test(`${compression.name}: a malformed stream is the client's error`, async () => {
    const ticket = new BodyBudget({ perConnection: mib, total: mib }).open(connection);
    const error = await refusal(() => chargingInflationTo({ ticket }, () => compression.decompress(Buffer.from("not compressed at all"), mib)));
    assert.is(error.code, Code.InvalidArgument);
  });

  test(`${compression.name}: a message that comes with no call's budget to charge is refused INTERNAL, never inflated, and said once at error level`, async () => {
    const log = errorLog();
    const compressions = chargedCompressions(log);
    const uncharged = compressions.find((c) => c.name === compression.name)!;
    const message = pack(Buffer.alloc(mib, 7));
    for (const [run, what] of [
      [() => uncharged.decompress(message, 4 * mib), "called outside any charge"],
      [() => chargingInflationTo(undefined, () => uncharged.decompress(message, 4 * mib)), "run with no charge"],
      [() => compressions.find((c) => c.name !== compression.name)!.decompress(message, 4 * mib), "the other coding, same logger"],
    ] as const) {
      const error = await refusal(run);
      assert.is(error.code, Code.Internal, what);
      assert.is(reasonOf(error), "INTERNAL", what);
    }
    assert.is(log.told.length, 1, `told once, not per message: ${JSON.stringify(log.told)}`);
    assert.match(log.told[0]!, /uncharged/);
    const ticket = new BodyBudget({ perConnection: 2 * mib, total: 2 * mib }).open(connection);
    const out = await chargingInflationTo({ ticket }, () => uncharged.decompress(message, 4 * mib));
    assert.is(out.length, mib, "with a charge, the same message is inflated");
  });
}

test("br: messages whose window their decoder must fill before any output (16 MiB each) are inflated two at a time in the process, not all at once", async () => {
  // The decoders, counted as they are made and closed.
  let live = 0;
  let most = 0;
  const [, compressionBrotliCharged] = chargedCompressions(errorLog(), () => {
    const decoder = zlib.createBrotliDecompress();
    most = Math.max(most, ++live);
    decoder.once("close", () => live--);
    return decoder;
  });
  {
    const bomb = zlib.brotliCompressSync(Buffer.alloc(32 * mib), { params: { [zlib.constants.BROTLI_PARAM_LGWIN]: 24, [zlib.constants.BROTLI_PARAM_QUALITY]: 5 } });
    const budget = new BodyBudget({ perConnection: 64 * mib, total: 64 * mib });
    const calls = Array.from({ length: 8 }, () => refusal(() => chargingInflationTo({ ticket: budget.open({}) }, () => compressionBrotliCharged.decompress(bomb, 16 * 1024))));
    for (const error of await Promise.all(calls)) assert.match(error.message, /larger than configured readMaxBytes 16384/);
    assert.ok(most <= 2, `${most} brotli decoders at once`);
    // A message waiting for its turn whose call ends is not inflated.
    const waiting = { ticket: budget.open({}) };
    const first = refusal(() => chargingInflationTo({ ticket: budget.open({}) }, () => compressionBrotliCharged.decompress(bomb, 16 * 1024)));
    const second = refusal(() => chargingInflationTo({ ticket: budget.open({}) }, () => compressionBrotliCharged.decompress(bomb, 16 * 1024)));
    const third = refusal(() => chargingInflationTo(waiting, () => compressionBrotliCharged.decompress(bomb, 16 * 1024)));
    waiting.ticket.close();
    assert.is((await third).code, Code.Canceled);
    await Promise.all([first, second]);
  }
});

test.run();

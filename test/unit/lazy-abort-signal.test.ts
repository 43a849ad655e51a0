import { EventEmitter } from "node:events";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { lazyAbortSignal } from "../../src/rpc/lazy-abort-signal.js";

/** A response that closes on demand, finished or not. */
class FakeResponse extends EventEmitter {
  writableFinished = false;
  closed = false;
  close(finished: boolean) {
    this.writableFinished = finished;
    this.closed = true;
    this.emit("close");
  }
}

test("nothing is made or listened for until the signal is asked for", () => {
  const res = new FakeResponse();
  const signal = lazyAbortSignal(res);
  assert.is(res.listenerCount("close"), 0);
  const first = signal();
  assert.is(res.listenerCount("close"), 1);
  assert.is(signal(), first, "one signal per response");
  assert.is(res.listenerCount("close"), 1);
});

test("aborts when the response closes unfinished, not when it finished", () => {
  const gone = new FakeResponse();
  const goneSignal = lazyAbortSignal(gone)();
  gone.close(false);
  assert.is(goneSignal.aborted, true);

  const answered = new FakeResponse();
  const answeredSignal = lazyAbortSignal(answered)();
  answered.close(true);
  assert.is(answeredSignal.aborted, false);
});

test("asked for after the response closed: aborted only if it closed unfinished", () => {
  const gone = new FakeResponse();
  const goneSignal = lazyAbortSignal(gone);
  gone.close(false);
  assert.is(goneSignal().aborted, true);

  const answered = new FakeResponse();
  const answeredSignal = lazyAbortSignal(answered);
  answered.close(true);
  assert.is(answeredSignal().aborted, false);
});

test("a real HTTP response: the client going away mid-request aborts the signal", async () => {
  let aborted: Promise<boolean> | undefined;
  const server = http.createServer((_req, res) => {
    const signal = lazyAbortSignal(res)();
    aborted = new Promise((resolve) => {
      signal.addEventListener("abort", () => resolve(true));
      setTimeout(() => resolve(false), 2_000);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const req = http.request({ port, host: "127.0.0.1", path: "/" });
  req.on("error", () => {});
  req.end();
  while (aborted === undefined) await new Promise((resolve) => setTimeout(resolve, 5));
  req.destroy();
  assert.is(await aborted, true);
  server.close();
});

test("an HTTP/2 stream the client resets aborts the signal; one answered whole does not", async () => {
  const signals: AbortSignal[] = [];
  const server = http2.createServer();
  server.on("stream", (stream, headers) => {
    signals.push(lazyAbortSignal(stream)());
    if (headers[":path"] === "/answer") {
      stream.respond({ ":status": 200 });
      stream.end("ok");
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const session = http2.connect(`http://127.0.0.1:${port}`);
  const answered = session.request({ ":path": "/answer" });
  answered.resume();
  await new Promise((resolve) => answered.once("close", resolve));
  const reset = session.request({ ":path": "/hang" });
  reset.on("error", () => {});
  while (signals.length < 2) await new Promise((resolve) => setTimeout(resolve, 5));
  reset.close(http2.constants.NGHTTP2_CANCEL);
  for (let i = 0; i < 200 && !signals[1]!.aborted; i++) await new Promise((resolve) => setTimeout(resolve, 5));
  assert.is(signals[0]!.aborted, false, "answered whole");
  assert.is(signals[1]!.aborted, true, "reset by the client");
  session.close();
  server.close();
});

test.run();

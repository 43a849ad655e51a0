import { ConnectError, createContextValues, type Interceptor, type StreamRequest, type StreamResponse } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { reasonOf } from "../../src/errors/api-error.js";
import { dropAnswerKey, openStreamsInterceptor, peerKey, peerOf } from "../../src/rpc/open-streams-interceptor.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A stream call through the interceptor from `peer`, answering messages for ever: its answer, or why it was refused. */
async function call(interceptor: ReturnType<typeof openStreamsInterceptor>, peer: string | undefined, drop?: () => void) {
  const values = createContextValues().set(peerKey, peer);
  if (drop !== undefined) values.set(dropAnswerKey, drop);
  async function* forever() {
    for (let i = 0; ; i++) yield i;
  }
  const next = (async (req: StreamRequest) => ({ ...req, message: forever(), header: new Headers(), trailer: new Headers() }) as unknown as StreamResponse) as unknown as Parameters<Interceptor>[0];
  const req = { stream: true, contextValues: values, signal: new AbortController().signal } as unknown as StreamRequest;
  try {
    return (await interceptor(next)(req)) as StreamResponse;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    return reasonOf(error);
  }
}

test("an IPv4 client is one peer whether the socket saw it as 10.0.0.1 or ::ffff:10.0.0.1", async () => {
  // Four places: one a peer.
  const interceptor = openStreamsInterceptor({ max: 4, untakenMs: 60_000 });
  assert.is.not(typeof (await call(interceptor, "10.0.0.1")), "string");
  assert.is(await call(interceptor, "::ffff:10.0.0.1"), "TOO_MANY_STREAMS");
  assert.is(await call(interceptor, "::FFFF:10.0.0.1"), "TOO_MANY_STREAMS");
  assert.is.not(typeof (await call(interceptor, "::ffff:10.0.0.2")), "string", "another address");
  assert.is.not(typeof (await call(interceptor, "2001:db8::1")), "string", "an IPv6 address is its own");
});

test("an IPv6 host is one peer over its /64: the addresses it may take there are one share", async () => {
  const interceptor = openStreamsInterceptor({ max: 4, untakenMs: 60_000 });
  assert.is.not(typeof (await call(interceptor, "fdbb:4c::1")), "string");
  assert.is(await call(interceptor, "fdbb:4c::2"), "TOO_MANY_STREAMS");
  assert.is(await call(interceptor, "fdbb:4c:0:0:ffff:1:2:3"), "TOO_MANY_STREAMS");
  assert.is(await call(interceptor, "FDBB:004C::9%eth0"), "TOO_MANY_STREAMS");
  assert.is.not(typeof (await call(interceptor, "fdbb:4c:0:1::1")), "string", "another /64");
  assert.equal(
    ["2001:db8::1", "2001:db8:0:0:1::", "::1", "2001:db8:1:2:3:4:5:6", "::ffff:10.1.2.3", "10.1.2.3", "64:ff9b::10.1.2.3", "not an address"].map(peerOf),
    ["2001:db8:0:0::/64", "2001:db8:0:0::/64", "0:0:0:0::/64", "2001:db8:1:2::/64", "10.1.2.3", "10.1.2.3", "64:ff9b:0:0::/64", "not an address"],
  );
});

test("a stream whose message is not taken within untakenMs is dropped and its place freed; one taken goes on", async () => {
  const interceptor = openStreamsInterceptor({ max: 1, untakenMs: 50 });
  let dropped = 0;
  const res = await call(interceptor, "10.0.0.1", () => dropped++);
  assert.is.not(typeof res, "string");
  const messages = (res as StreamResponse).message[Symbol.asyncIterator]();
  // Taken at once, message after message: never dropped.
  for (let i = 0; i < 5; i++) {
    await messages.next();
    await sleep(20);
  }
  assert.is(dropped, 0);
  assert.is(await call(interceptor, "10.0.0.2"), "TOO_MANY_STREAMS", "its place is held");
  // The next one is ready, and left.
  await sleep(120);
  assert.is(dropped, 1);
  assert.is.not(typeof (await call(interceptor, "10.0.0.2")), "string", "its place is free");
});

test.run();

import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type CallPass, CallGate, type CallRefusal, type CallWait, isRefusal, isWait } from "../../src/http/call-gate.js";

const s = suite("call gate: unary calls running, per connection and in all, and waiting for a place");

function admitted(entry: CallPass | CallWait | CallRefusal): CallPass {
  if (isRefusal(entry) || isWait(entry)) throw new Error(`not let in at once: ${JSON.stringify(entry)}`);
  return entry;
}

function waiting(entry: CallPass | CallWait | CallRefusal): CallWait {
  if (!isWait(entry)) throw new Error(`not waiting: ${JSON.stringify(entry)}`);
  return entry;
}

/** A call that ran and was answered. */
function finish(pass: CallPass): void {
  assert.ok(pass.begin());
  pass.end();
  pass.responded();
}

s("a connection past its limit is refused, others are not; the server past its places and its queue refuses everyone", () => {
  const gate = new CallGate({ perConnection: 2, total: 3, queued: 1, perCaller: 100 });
  const a = {};
  const b = {};
  admitted(gate.enter(a));
  admitted(gate.enter(a));
  assert.equal(gate.enter(a), { scope: "connection", limit: 2 });
  admitted(gate.enter(b));
  waiting(gate.enter(b));
  assert.equal(gate.enter(b), { scope: "connection", limit: 2 }, "a waiting call counts against its connection");
  assert.equal(gate.enter({}), { scope: "server", limit: 3 }, "the queue is full");
  assert.is(gate.running, 3);
  assert.is(gate.waiting, 1);
});

s("a place is given back once both the answer is done and the handler has returned, in either order, once", () => {
  const gate = new CallGate({ perConnection: 5, total: 5, queued: 0, perCaller: 100 });
  const c = {};
  const normal = admitted(gate.enter(c));
  assert.ok(normal.begin());
  normal.end();
  assert.is(gate.running, 1, "answered not yet: still held");
  normal.responded();
  assert.is(gate.running, 0);
  // A reset stream: the answer ends first, the work later.
  const reset = admitted(gate.enter(c));
  assert.ok(reset.begin());
  reset.responded();
  assert.is(gate.running, 1, "the handler's work still runs: still held");
  reset.end();
  assert.is(gate.running, 0);
  reset.responded();
  reset.end();
  assert.is(gate.running, 0, "given back once");
});

s("a call whose client went away before its handler began is given back at once, and its handler need not run", () => {
  const gate = new CallGate({ perConnection: 1, total: 1, queued: 0, perCaller: 100 });
  const c = {};
  const gone = admitted(gate.enter(c));
  gone.responded();
  assert.is(gate.running, 0);
  assert.is(gone.begin(), false);
  admitted(gate.enter(c));
});

s("waiting calls get freed places in the order they came; one that gives up is refused and leaves no trace", async () => {
  const gate = new CallGate({ perConnection: 10, total: 1, queued: 3, perCaller: 100 });
  const first = admitted(gate.enter({}));
  const order: string[] = [];
  const [x, gaveUp, y] = ["x", "gave-up", "y"].map((name) => {
    const wait = waiting(gate.enter({}));
    void wait.admitted.then((entry) => order.push(`${name}:${isRefusal(entry) ? "refused" : "in"}`));
    return wait;
  });
  gaveUp!.cancel();
  finish(first);
  const xPass = await x!.admitted;
  assert.is(gate.running, 1, "the place went to x, not back to the pool");
  finish(admitted(xPass));
  const yPass = admitted(await y!.admitted);
  await Promise.resolve();
  assert.equal(order, ["gave-up:refused", "x:in", "y:in"]);
  finish(yPass);
  assert.equal([gate.running, gate.waiting], [0, 0]);
  x!.cancel();
  assert.is(gate.running, 0, "cancelling one already let in changes nothing");
});

s("a caller holds at most perCaller places over all its connections; each place it gives back is its own again", () => {
  const gate = new CallGate({ perConnection: 10, total: 10, queued: 0, perCaller: 2 });
  const calls = [{}, {}, {}].map((connection) => admitted(gate.enter(connection)));
  assert.ok(calls[0]!.claim("mallory"));
  assert.ok(calls[1]!.claim("mallory"));
  assert.is(calls[2]!.claim("mallory"), false, "a third, on a third connection, is refused");
  assert.ok(calls[2]!.claim("alice"), "another caller is not");
  calls[2]!.responded();
  assert.ok(calls[0]!.claim("mallory"), "claiming twice counts once");
  finish(calls[0]!);
  const again = admitted(gate.enter({}));
  assert.ok(again.claim("mallory"), "a finished call's place is the caller's again");
  finish(calls[1]!);
  finish(again);
  const fresh = admitted(gate.enter({}));
  assert.ok(fresh.claim("mallory"));
  assert.is(gate.running, 1);
});

s.run();

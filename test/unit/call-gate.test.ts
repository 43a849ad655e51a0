import { suite } from "uvu";
import * as assert from "uvu/assert";
import { type CallPass, CallGate, type CallRefusal, isRefusal } from "../../src/http/call-gate.js";

const s = suite("call gate: unary calls running, per connection and in all");

function admitted(entry: CallPass | CallRefusal): CallPass {
  if (isRefusal(entry)) throw new Error(`refused: ${JSON.stringify(entry)}`);
  return entry;
}

s("a connection past its limit is refused, others are not; the server past its limit refuses everyone", () => {
  const gate = new CallGate({ perConnection: 2, total: 3 });
  const a = {};
  const b = {};
  admitted(gate.enter(a));
  admitted(gate.enter(a));
  assert.equal(gate.enter(a), { scope: "connection", limit: 2 });
  admitted(gate.enter(b));
  assert.equal(gate.enter(b), { scope: "server", limit: 3 });
  assert.is(gate.running, 3);
});

s("a place is given back once both the answer is done and the handler has returned, in either order, once", () => {
  const gate = new CallGate({ perConnection: 5, total: 5 });
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
  const gate = new CallGate({ perConnection: 1, total: 1 });
  const c = {};
  const gone = admitted(gate.enter(c));
  gone.responded();
  assert.is(gate.running, 0);
  assert.is(gone.begin(), false);
  admitted(gate.enter(c));
});

s.run();

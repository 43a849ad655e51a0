import type { IncomingHttpHeaders } from "node:http";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { RequestHeaders, webHeaders } from "../../src/rpc/web-headers.js";

// Node's parsed request headers: lower-cased names, repeated ones as arrays,
// HTTP/2 pseudo-headers mixed in.
const raw: IncomingHttpHeaders = {
  ":path": "/entityversions.v1.EntityVersionsService/GetActiveVersion",
  ":method": "POST",
  authorization: "Bearer abc",
  "content-type": "application/grpc",
  accept: ["text/plain", "application/json"] as unknown as string,
  "x-empty": "",
};

test("get and has answer as a fetch Headers built from the same headers", () => {
  const view = new RequestHeaders(raw);
  const full = webHeaders(raw);
  for (const name of ["authorization", "Authorization", "CONTENT-TYPE", "accept", "x-empty", "missing"]) {
    assert.is(view.get(name), full.get(name), name);
    assert.is(view.has(name), full.has(name), name);
  }
  // Pseudo-headers are not header names: both refuse them.
  assert.throws(() => full.get(":path"), /invalid header name/);
  assert.throws(() => new RequestHeaders(raw).get(":path"), /invalid header name/);
  assert.is(view.get("accept"), "text/plain, application/json", "a repeated header is joined");
});

test("iteration gives what a fetch Headers gives, pseudo-headers left out", () => {
  const view = new RequestHeaders(raw);
  assert.equal([...view], [...webHeaders(raw)]);
  assert.equal([...view.keys()], ["accept", "authorization", "content-type", "x-empty"]);
  const seen: Array<[string, string, unknown]> = [];
  view.forEach((value, key, parent) => seen.push([key, value, parent]));
  assert.equal(
    seen.map(([k, v]) => [k, v]),
    [...webHeaders(raw)],
  );
  assert.ok(seen.every(([, , parent]) => parent === view), "forEach passes the view itself as the parent");
});

test("changes are seen by later reads, and Node's object is left as it was", () => {
  const copy = { ...raw };
  const view = new RequestHeaders(copy);
  view.set("authorization", "Bearer other");
  view.append("x-added", "1");
  view.delete("content-type");
  assert.is(view.get("authorization"), "Bearer other");
  assert.is(view.get("x-added"), "1");
  assert.is(view.has("content-type"), false);
  assert.equal(copy, raw);
  assert.is(Object.prototype.toString.call(view), "[object Headers]");
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { dropUntimeableDeadlines, restTimeoutMs } from "../../src/rpc/timeout-headers.js";

const after = (name: string, value: string) => {
  const header = new Headers({ [name]: value });
  dropUntimeableDeadlines(header);
  return header.get(name);
};

test("a gRPC deadline a timer can hold is kept; a longer one is dropped; a malformed one is left for Connect", () => {
  for (const kept of ["596H", "35791M", "2147483S", "21474836m", "99999999u", "99999999n", "0S"]) assert.is(after("grpc-timeout", kept), kept, kept);
  for (const dropped of ["597H", "35792M", "2147484S", "8760H", "99999999H"]) assert.is(after("grpc-timeout", dropped), null, dropped);
  for (const malformed of ["999999999H", "1.5S", "-1S", "10", "abc"]) assert.is(after("grpc-timeout", malformed), malformed, malformed);
});

test("a Connect deadline over 2^31 - 1 ms is dropped; one within is kept; a malformed one is left for Connect", () => {
  assert.is(after("connect-timeout-ms", "2147483647"), "2147483647");
  assert.is(after("connect-timeout-ms", "2147483648"), null);
  assert.is(after("connect-timeout-ms", "9999999999"), null);
  assert.is(after("connect-timeout-ms", "99999999999"), "99999999999");
  assert.is(after("connect-timeout-ms", "-5"), "-5");
});

test("REST's Grpc-Timeout: read in milliseconds, none when absent or too long for a timer, refused when malformed", () => {
  const of = (value?: string) => restTimeoutMs(new Headers(value === undefined ? {} : { "grpc-timeout": value }));
  assert.is(of(), undefined);
  assert.is(of("5S"), 5_000);
  assert.is(of("250m"), 250);
  assert.is(of("2M"), 120_000);
  assert.is(of("8760H"), undefined);
  for (const bad of ["5", "5s", "1.5S", "123456789S", ""]) assert.throws(() => of(bad), /Grpc-Timeout/, bad);
});

test.run();

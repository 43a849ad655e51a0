import { test } from "uvu";
import * as assert from "uvu/assert";
import { clientTimeoutMs, deadlineHeader, dropUntimeableDeadlines, restTimeoutMs, spendDeadline } from "../../src/rpc/timeout-headers.js";

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

test("a client's deadline is read from its protocol's header; none, a malformed one or one past a timer is none", () => {
  assert.is(clientTimeoutMs("grpc-timeout", "2S"), 2000);
  assert.is(clientTimeoutMs("grpc-timeout", "1500u"), 1.5);
  assert.is(clientTimeoutMs("connect-timeout-ms", "250"), 250);
  assert.is(clientTimeoutMs("grpc-timeout", undefined), undefined);
  assert.is(clientTimeoutMs("grpc-timeout", "2s"), undefined);
  assert.is(clientTimeoutMs("connect-timeout-ms", "-1"), undefined);
  assert.is(clientTimeoutMs("grpc-timeout", "8760H"), undefined);
  // Each header in its own grammar: 250 is no grpc-timeout, 2S no connect-timeout-ms.
  assert.is(clientTimeoutMs("grpc-timeout", "250"), undefined);
  assert.is(clientTimeoutMs("connect-timeout-ms", "2S"), undefined);
});

test("which header carries the deadline: gRPC's and gRPC-Web's by content type, Connect's on other RPC calls, gRPC's on REST", () => {
  assert.is(deadlineHeader("application/grpc+proto", true), "grpc-timeout");
  assert.is(deadlineHeader("application/grpc-web-text", true), "grpc-timeout");
  assert.is(deadlineHeader("application/json", true), "connect-timeout-ms");
  assert.is(deadlineHeader("application/connect+proto", true), "connect-timeout-ms");
  assert.is(deadlineHeader(undefined, true), "connect-timeout-ms", "a Connect GET has no content type");
  assert.is(deadlineHeader("application/json", false), "grpc-timeout", "REST, as grpc-gateway reads it");
});

test("the time a call spent before its handler is taken off its deadline, never below 0, in a value the protocol allows", () => {
  const spent = (name: string, value: string, elapsedMs: number) => {
    const header = new Headers({ [name]: value });
    spendDeadline(header, elapsedMs);
    return header.get(name);
  };
  assert.is(spent("grpc-timeout", "1S", 300.4), "699m");
  assert.is(spent("grpc-timeout", "1S", 1500), "0m");
  assert.is(spent("grpc-timeout", "596H", 1000), "2145599S", "past 8 digits of milliseconds: seconds");
  assert.is(spent("grpc-timeout", "5s", 1000), "5s", "malformed: left for Connect to refuse");
  assert.is(spent("connect-timeout-ms", "1000", 250.5), "749");
  assert.is(spent("connect-timeout-ms", "100", 250), "0");
  assert.is(spent("connect-timeout-ms", "x", 250), "x");
});

test.run();

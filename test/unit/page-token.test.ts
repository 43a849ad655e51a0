import { test } from "uvu";
import * as assert from "uvu/assert";
import { PageTokens } from "../../src/api/page-token.js";

const tokens = new PageTokens(Buffer.from("0123456789abcdef0123456789abcdef"));

test("a token round-trips for its own entity only", () => {
  const t = tokens.encode({ entityId: "e1", beforeSeq: 42 });
  assert.equal(tokens.decode(t, "e1"), { entityId: "e1", beforeSeq: 42 });
  assert.is(tokens.decode(t, "e2"), undefined);
});

test("altered, forged and foreign-secret tokens are refused", () => {
  const t = tokens.encode({ entityId: "e1", beforeSeq: 42 });
  const [payload, mac] = t.split(".") as [string, string];
  const forged = `${Buffer.from(JSON.stringify(["e1", 1])).toString("base64url")}.${mac}`;
  const other = new PageTokens(Buffer.from("another secret, also 32 bytes!!!")).encode({ entityId: "e1", beforeSeq: 42 });
  for (const bad of [forged, `${payload}.`, `${payload}`, "", ".", `${payload}.${mac}x`, other, "a".repeat(600)]) {
    assert.is(tokens.decode(bad, "e1"), undefined, bad);
  }
});

test("a token of one listing is refused by another (versions, events)", () => {
  const events = new PageTokens(Buffer.from("0123456789abcdef0123456789abcdef"), "events");
  const t = events.encode({ entityId: "e1", beforeSeq: 42 });
  assert.equal(events.decode(t, "e1"), { entityId: "e1", beforeSeq: 42 });
  assert.is(tokens.decode(t, "e1"), undefined);
  assert.is(events.decode(tokens.encode({ entityId: "e1", beforeSeq: 42 }), "e1"), undefined);
});

test.run();

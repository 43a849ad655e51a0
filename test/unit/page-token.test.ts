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
  const bytes = Buffer.from(t, "base64url");
  const flipped = Buffer.from(bytes);
  flipped[14]! ^= 1;
  const other = new PageTokens(Buffer.from("another secret, also 32 bytes!!!")).encode({ entityId: "e1", beforeSeq: 42 });
  for (const bad of [flipped.toString("base64url"), t.slice(0, -2), `${t}AA`, "", ".", `${t}.`, other, "a".repeat(600), Buffer.from(JSON.stringify(["e1", 1])).toString("base64url")]) {
    assert.is(tokens.decode(bad, "e1"), undefined, bad);
  }
});

test("a token says nothing a client can read (AIP-158: not user-parseable); one cursor gives one token", () => {
  const t = tokens.encode({ entityId: "entity-with-a-name", beforeSeq: 123456 });
  const decoded = Buffer.from(t, "base64url").toString("latin1");
  assert.not.match(decoded, "entity-with-a-name");
  assert.not.match(decoded, "123456");
  assert.is(tokens.encode({ entityId: "entity-with-a-name", beforeSeq: 123456 }), t);
  assert.is.not(tokens.encode({ entityId: "entity-with-a-name", beforeSeq: 123455 }).slice(0, 16), t.slice(0, 16), "another cursor, another nonce");
  assert.match(t, /^[A-Za-z0-9_-]+$/, "URL-safe");
});

test("a token of one listing is refused by another (versions, events)", () => {
  const events = new PageTokens(Buffer.from("0123456789abcdef0123456789abcdef"), "events");
  const t = events.encode({ entityId: "e1", beforeSeq: 42 });
  assert.equal(events.decode(t, "e1"), { entityId: "e1", beforeSeq: 42 });
  assert.is(tokens.decode(t, "e1"), undefined);
  assert.is(events.decode(tokens.encode({ entityId: "e1", beforeSeq: 42 }), "e1"), undefined);
});

test("a token's every other spelling is refused: base64url's spare bits in the last character", () => {
  for (let seq = 1; seq < 40; seq++) {
    const t = tokens.encode({ entityId: "e1", beforeSeq: seq });
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (const c of alphabet) {
      const other = `${t.slice(0, -1)}${c}`;
      if (other !== t) assert.is(tokens.decode(other, "e1"), undefined, `${t} as ${other}`);
    }
  }
});

test("after a change of secret, tokens of the previous one still open (PAGE_TOKEN_SECRET_PREVIOUS), and new ones are sealed with the new", () => {
  const old = new PageTokens(Buffer.from("0123456789abcdef0123456789abcdef"), "events");
  const next = new PageTokens(Buffer.from("another secret, also 32 bytes!!!"), "events", [Buffer.from("0123456789abcdef0123456789abcdef")]);
  const issuedBefore = old.encode({ entityId: "e1", beforeSeq: 42 });
  assert.equal(next.decode(issuedBefore, "e1"), { entityId: "e1", beforeSeq: 42 });
  assert.is(next.decode(issuedBefore, "e2"), undefined, "still bound to its entity");
  assert.is(new PageTokens(Buffer.from("another secret, also 32 bytes!!!"), "", [Buffer.from("0123456789abcdef0123456789abcdef")]).decode(issuedBefore, "e1"), undefined, "and to its listing");
  const issuedAfter = next.encode({ entityId: "e1", beforeSeq: 42 });
  assert.is.not(issuedAfter, issuedBefore);
  assert.is(old.decode(issuedAfter, "e1"), undefined, "sealed with the new secret");
  assert.is(new PageTokens(Buffer.from("another secret, also 32 bytes!!!"), "events").decode(issuedBefore, "e1"), undefined, "without it, refused");
});

test.run();

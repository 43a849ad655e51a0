import { test } from "uvu";
import * as assert from "uvu/assert";
import { minimalGrpcMessage } from "../../src/rpc/grpc-message.js";

test("printable ASCII but % is sent as is; % and other bytes as UTF-8 escapes", () => {
  const text = 'Invalid entity_id: "a/b", see /docs?x=1 — 100% é';
  const sent = minimalGrpcMessage(encodeURIComponent(text));
  assert.is(sent, 'Invalid entity_id: "a/b", see /docs?x=1 %E2%80%94 100%25 %C3%A9');
  // What grpc-js (decodeURI) and Connect (decodeURIComponent) read back.
  assert.is(decodeURI(sent), text);
  assert.is(decodeURIComponent(sent), text);
});

test("a value that is not valid percent-encoding is passed on unchanged", () => {
  assert.is(minimalGrpcMessage("50%"), "50%");
  assert.is(minimalGrpcMessage("%E2%80"), "%E2%80");
});

test.run();

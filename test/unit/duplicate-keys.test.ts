import { test } from "uvu";
import * as assert from "uvu/assert";
import { firstDuplicateKey } from "../../src/rest/duplicate-keys.js";

test("finds a key given twice in one object, at any depth, also when spelled with escapes", () => {
  assert.is(firstDuplicateKey('{"a":1,"a":2}'), "a");
  assert.is(firstDuplicateKey('{"a":1,"\\u0061":2}'), "a");
  assert.is(firstDuplicateKey('{"x":{"b":[1,{"c":1,"c":2}]}}'), "c");
  assert.is(firstDuplicateKey('[{"k":1},{"k":2,"k":3}]'), "k");
  assert.is(firstDuplicateKey('{"o":{"p":1},"q":{"p":1,"r":"x","p":2}}'), "p");
});

test("accepts distinct keys, equal keys in different objects, and keys inside string values", () => {
  for (const text of [
    "{}",
    "[]",
    '"a"',
    "1",
    '{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}',
    '{"a":"{\\"a\\":1,\\"a\\":2}","b":"a"}',
    '{"a\\"":1,"a":2}',
    '{"a":["a","a"],"b":{"a":"a"}}',
    '{"a\\\\":1,"a":2}',
  ]) {
    assert.is(firstDuplicateKey(text), undefined, text);
  }
});

test.run();

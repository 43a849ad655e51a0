import { test } from "uvu";
import * as assert from "uvu/assert";
import { checkJsonText } from "../../src/rest/json-text-check.js";

const firstDuplicateKey = (text: string) => {
  const problem = checkJsonText(text);
  return problem !== undefined && "duplicateKey" in problem ? problem.duplicateKey : undefined;
};

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
    assert.is(checkJsonText(text), undefined, text);
  }
});

test("finds an integer a JSON number holds only rounded, and nothing else a double holds exactly or approximately by nature", () => {
  assert.equal(checkJsonText('{"big":12345678901234567890}'), { roundedInteger: "12345678901234567890" });
  assert.equal(checkJsonText("[1,-9007199254740993]"), { roundedInteger: "-9007199254740993" });
  // Past a double's range: read as Infinity, and answered at once however long.
  const huge = "9".repeat(400);
  assert.equal(checkJsonText(`[${huge}]`), { roundedInteger: huge });
  const long = `-${"1".repeat(1_000_000)}`;
  assert.equal(checkJsonText(`{"n": ${long}}`), { roundedInteger: long });
  assert.equal(checkJsonText('{"s":"12345678901234567890","n":9007199254740992}'), undefined, "in a string, or exactly held (2^53)");
  for (const text of ["[1e300, 0.1, 1.5e-7, 123456789012345678.5, -0, 9007199254740991]", '{"a":[100000000000000000000]}']) {
    assert.is(checkJsonText(text), undefined, text);
  }
});

test.run();

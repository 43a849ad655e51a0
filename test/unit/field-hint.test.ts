import { test } from "uvu";
import * as assert from "uvu/assert";
import { closestName, shownName, unknownNameProblem } from "../../src/rest/field-hint.js";

const names = ["version", "source_hash", "base_version_id", "force"];

test("suggests the name a caller most likely meant: a typo, a name cut short, another spelling", () => {
  assert.is(closestName("verison", names), "version");
  assert.is(closestName("base_version", names), "base_version_id");
  assert.is(closestName("sourceHash", names), "source_hash");
  assert.is(closestName("colour", names), undefined);
});

test("a name far longer than every field is no typo of one, and is shown cut short", () => {
  const huge = "z".repeat(1_000_000);
  assert.is(closestName(huge, names), undefined);
  assert.is(closestName(`force${"z".repeat(100)}`, names), "force", "still a name with a field's name before it");
  assert.is(shownName(huge), `${"z".repeat(64)}…`);
  assert.is(shownName("version"), "version");
  assert.match(unknownNameProblem("field", huge, names), /^no such field; this request's fields are version/);
});

test.run();

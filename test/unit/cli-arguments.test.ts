// The CLI's checks of its arguments, before anything is sent.
import { InvalidArgumentError } from "commander";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { parseVersionId } from "../../src/cli/arguments.js";

test("a version string given where a version id goes is named as such", () => {
  assert.is(parseVersionId("3f2c1e9a-0b7d-4c8e-9f10-2a3b4c5d6e7f"), "3f2c1e9a-0b7d-4c8e-9f10-2a3b4c5d6e7f");
  for (const [value, said] of [
    ["2026.11.27-080016", '"2026.11.27-080016" is a version string, not a version id'],
    ["not/an id", "version ids are 1-64 ASCII letters"],
  ] as const) {
    try {
      parseVersionId(value);
      assert.unreachable(value);
    } catch (error) {
      assert.instance(error, InvalidArgumentError);
      assert.match((error as Error).message, said);
    }
  }
  try {
    parseVersionId("not/an id");
  } catch (error) {
    assert.not.match((error as Error).message, "is a version string");
  }
});

test.run();

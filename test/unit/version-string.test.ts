import { test } from "uvu";
import * as assert from "uvu/assert";
import { isVersionString } from "../../src/domain/version-string.js";

test("accepts real dates and times", () => {
  for (const v of ["2026.11.21-093000", "2024.02.29-235959", "2000.02.29-000000", "0001.01.01-000000"]) {
    assert.ok(isVersionString(v), v);
  }
});

test("refuses impossible dates and times", () => {
  for (const v of ["2026.02.29-000000", "1900.02.29-000000", "2026.04.31-000000", "2026.13.01-000000", "2026.00.10-000000", "2026.01.00-000000", "2026.01.01-240000", "2026.01.01-236000", "2026.01.01-235960", "0000.01.01-000000"]) {
    assert.not.ok(isVersionString(v), v);
  }
});

test("refuses other shapes", () => {
  for (const v of ["", "2026.11.21", "2026-11-21-093000", "2026.11.21-09300", "2026.11.21-0930000", " 2026.11.21-093000", "2026.11.21-093000\n", "２026.11.21-093000"]) {
    assert.not.ok(isVersionString(v), JSON.stringify(v));
  }
});

test.run();

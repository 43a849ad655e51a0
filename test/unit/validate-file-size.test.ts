// file_size_bytes as the API checks it: a size past MAX_PACKAGE_BYTES is
// refused saying which setting bounds it and what to do.
import { ConnectError } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { fileSize } from "../../src/api/validate.js";
import { loadConfig } from "../../src/config.js";

const limits = loadConfig({ MAX_PACKAGE_BYTES: "1024" }).limits;

test("a size within MAX_PACKAGE_BYTES is taken; past it, or under 1, it is refused saying what to do", () => {
  assert.is(fileSize(1024n, limits), 1024);
  for (const [size, says] of [
    [1025n, "1025 is more than the maximum package size of 1024 bytes (the service's MAX_PACKAGE_BYTES): make the package smaller"],
    [0n, "must be at least 1"],
  ] as const) {
    try {
      fileSize(size, limits);
      assert.unreachable(`${size} was taken`);
    } catch (error) {
      assert.instance(error, ConnectError);
      assert.match((error as ConnectError).rawMessage, says);
    }
  }
});

test.run();

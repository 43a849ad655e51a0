// REST JSON into request messages: what is refused before protobuf-es reads it.
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ConfirmUploadRequestSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { reasonOf } from "../../src/errors/api-error.js";
import { readRestJson } from "../../src/rest/json-codec.js";
import { ConnectError } from "@connectrpc/connect";

const refusal = (json: Record<string, unknown>) => {
  try {
    readRestJson(ConfirmUploadRequestSchema, json as never);
    return undefined;
  } catch (error) {
    return error instanceof ConnectError ? `${reasonOf(error)}: ${error.rawMessage}` : String(error);
  }
};

test("an int64 string is refused from its length only past what a 64-bit integer can be: leading zeros are digits of nothing", () => {
  const read = readRestJson(ConfirmUploadRequestSchema, { file_size_bytes: "0000000000000000000042" } as never) as unknown as { fileSizeBytes: bigint };
  assert.is(read.fileSizeBytes, 42n);
  assert.is(refusal({ file_size_bytes: "-9223372036854775808" }), undefined);
  assert.match(refusal({ file_size_bytes: "1".repeat(21) }) ?? "", /^INVALID_ARGUMENT: Invalid file_size_bytes: 1{21} is out of range/);
  // Zeros too count, past any length a client writes: BigInt reads them all.
  assert.match(refusal({ file_size_bytes: "0".repeat(1_000_000) + "1" }) ?? "", "is out of range");
});

test.run();

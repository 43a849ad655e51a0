import { brotliCompressSync, brotliDecompressSync, constants } from "node:zlib";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { brotliAnswerQuality, compressBrotliAnswer } from "../../src/rpc/brotli.js";

const sample = Buffer.from(Array.from({ length: 4000 }, (_, i) => `{"id":"v-${i}","version":"2024.01.01-${String(i).padStart(6, "0")}"}`).join(","));

test("answers are compressed at brotliAnswerQuality, not Node's default 11, and read back whole", async () => {
  assert.ok(brotliAnswerQuality <= 5, "a quality whose cost is gzip's order");
  const out = Buffer.from(await compressBrotliAnswer(sample));
  assert.ok(out.equals(brotliCompressSync(sample, { params: { [constants.BROTLI_PARAM_QUALITY]: brotliAnswerQuality } })), "the bytes quality 4 gives");
  assert.not.ok(out.equals(brotliCompressSync(sample)), "not the default quality's");
  assert.ok(brotliDecompressSync(out).equals(sample));
});

test.run();

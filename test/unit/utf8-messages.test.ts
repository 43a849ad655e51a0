// JSON request messages that are not UTF-8 are refused however the body
// arrives in chunks: a character or an envelope's prefix split between
// two, several envelopes in one.
import { ConnectError } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { reasonOf } from "../../src/errors/api-error.js";
import { jsonFraming, utf8JsonMessages } from "../../src/rpc/utf8-messages.js";

const envelope = (flags: number, payload: Buffer) => {
  const prefix = Buffer.alloc(5);
  prefix[0] = flags;
  prefix.writeUInt32BE(payload.length, 1);
  return Buffer.concat([prefix, payload]);
};

/** The body cut into chunks of `size` bytes, read through the check: what came through, or the refusal. */
async function read(body: Buffer, framing: "bare" | "enveloped", size: number): Promise<Buffer | ConnectError> {
  async function* chunks() {
    for (let at = 0; at < body.length; at += size) yield body.subarray(at, at + size);
  }
  const got: Uint8Array[] = [];
  try {
    for await (const chunk of utf8JsonMessages(chunks(), framing)) got.push(chunk);
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  return Buffer.concat(got);
}

const good = Buffer.from('{"name":"café ☕ 𝄞"}');
const bad = Buffer.concat([Buffer.from('{"name":"x'), Buffer.from([0xff, 0xc0, 0xaf]), Buffer.from('"}')]);
// A character cut short: valid up to the end of each chunk, not as a whole.
const truncated = Buffer.concat([Buffer.from('{"name":"'), Buffer.from("☕").subarray(0, 2), Buffer.from('"}')]);

test("a bare body passes whole and unchanged when UTF-8, at any chunk size; refused otherwise", async () => {
  for (const size of [1, 2, 3, 7, 1000]) {
    assert.ok(good.equals((await read(good, "bare", size)) as Buffer), `chunks of ${size}`);
    for (const body of [bad, truncated]) {
      const refused = await read(body, "bare", size);
      assert.instance(refused, ConnectError, `chunks of ${size}`);
      assert.is(reasonOf(refused as ConnectError), "MALFORMED_REQUEST");
      assert.match((refused as ConnectError).rawMessage, "a request message is not UTF-8");
    }
  }
});

test("envelopes are read across chunks: each message looked at, a compressed one left for its inflation", async () => {
  const body = Buffer.concat([envelope(0, good), envelope(0, Buffer.alloc(0)), envelope(1, bad), envelope(0, good)]);
  const withBad = Buffer.concat([envelope(0, good), envelope(0, truncated), envelope(0, good)]);
  for (const size of [1, 2, 4, 5, 6, 9, 1000]) {
    assert.ok(body.equals((await read(body, "enveloped", size)) as Buffer), `chunks of ${size}`);
    const refused = await read(withBad, "enveloped", size);
    assert.instance(refused, ConnectError, `chunks of ${size}`);
    assert.is(reasonOf(refused as ConnectError), "MALFORMED_REQUEST");
  }
});

test("the JSON content types are Connect's, gRPC's and gRPC-Web's, as Connect reads them", () => {
  assert.is(jsonFraming("application/json"), "bare");
  assert.is(jsonFraming("Application/JSON; charset=utf-8"), "bare");
  for (const type of ["application/connect+json", "application/grpc+json", "application/grpc-web+json;charset=UTF8"]) assert.is(jsonFraming(type), "enveloped", type);
  for (const type of [null, "application/proto", "application/grpc", "application/grpc-web-text+json", "application/json; charset=latin1"]) assert.is(jsonFraming(type), undefined, String(type));
});

test.run();

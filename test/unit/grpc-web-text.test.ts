// gRPC-Web's text form: its bodies translated to and from the binary form.
import { ConnectError } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { decodedTextBody, encodedTextBody, isGrpcWebText } from "../../src/rpc/grpc-web-text.js";

async function* chunks(...texts: string[]): AsyncGenerator<Uint8Array> {
  for (const text of texts) yield Buffer.from(text, "latin1");
}

async function all(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(Buffer.from(chunk));
  return Buffer.concat(parts);
}

test("the text form is told by its content type, in any letter case, with or without +proto and parameters; nothing else is", () => {
  for (const type of ["application/grpc-web-text", "application/grpc-web-text+proto", "Application/GRPC-Web-Text+Proto", "application/grpc-web-text; charset=utf-8"]) assert.ok(isGrpcWebText(type), type);
  for (const type of ["application/grpc-web", "application/grpc-web+proto", "application/grpc-web-text+json", "application/grpc", "", null, undefined]) assert.not.ok(isGrpcWebText(type), String(type));
});

test("a body decodes whatever its chunks' lengths, with padded runs inside it and whitespace between groups", async () => {
  const bytes = Buffer.from("any bytes at all, \u0000\u00ff, in two runs", "latin1");
  const text = bytes.subarray(0, 5).toString("base64") + bytes.subarray(5, 11).toString("base64") + "\r\n" + bytes.subarray(11).toString("base64");
  for (const size of [1, 3, 4, 5, 7, text.length]) {
    const pieces = Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, i * size + size));
    assert.equal(await all(decodedTextBody(chunks(...pieces))), bytes, `chunks of ${size}`);
  }
});

test("a body that is not base64, or ends partway through a group of four, is MALFORMED_REQUEST", async () => {
  for (const text of ["YWJj*", "YWJjZ", "YW"]) {
    try {
      await all(decodedTextBody(chunks(text)));
      assert.unreachable(text);
    } catch (error) {
      assert.instance(error, ConnectError, text);
      assert.match((error as ConnectError).rawMessage, "gRPC-Web text body", text);
    }
  }
});

test("a stray character is named as not base64 wherever it comes, in the body's last, unfinished group too", async () => {
  for (const pieces of [["YWJj*"], ["YWJjZ*"], ["YW", "*"], ["YWJj", "ZGVm", "Z!"]]) {
    try {
      await all(decodedTextBody(chunks(...pieces)));
      assert.unreachable(pieces.join(""));
    } catch (error) {
      assert.match((error as ConnectError).rawMessage, "is not base64", pieces.join(""));
    }
  }
});

test("an answer is encoded chunk by chunk, each padded, so that nothing of a chunk waits for the next", async () => {
  const encoded: string[] = [];
  for await (const chunk of encodedTextBody(chunks("a", "", "bcde"))) encoded.push(Buffer.from(chunk).toString("latin1"));
  assert.equal(encoded, ["YQ==", "YmNkZQ=="]);
  assert.equal(await all(decodedTextBody(chunks(encoded.join("")))), Buffer.from("abcde"));
});

test.run();

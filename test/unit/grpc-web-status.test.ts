// The status of a gRPC-Web answer, read from its trailer frame as the body goes out.
import { test } from "uvu";
import { brotliCompressSync, gzipSync } from "node:zlib";
import * as assert from "uvu/assert";
import { watchingGrpcWebStatus } from "../../src/rpc/grpc-web-status.js";

const frame = (flag: number, payload: string) => {
  const bytes = Buffer.from(payload, "latin1");
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([head, bytes]);
};

async function* split(body: Buffer, size: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < body.length; at += size) yield body.subarray(at, at + size);
}

test("the trailer frame's grpc-status is read whatever the chunks, after messages, and the body passes through unchanged", async () => {
  const body = Buffer.concat([frame(0, "a message \u0080 with grpc-status: 9 inside"), frame(0, ""), frame(0x80, "grpc-message: x\r\ngrpc-status: 5\r\n")]);
  for (const size of [1, 2, 5, 7, body.length]) {
    const seen: number[] = [];
    const out: Buffer[] = [];
    for await (const chunk of watchingGrpcWebStatus(split(body, size), (code) => seen.push(code))) out.push(Buffer.from(chunk));
    assert.equal(seen, [5], `chunks of ${size}`);
    assert.equal(Buffer.concat(out), body, `chunks of ${size}`);
  }
});

test("a body without a trailer frame, or one without a status gRPC defines, reports nothing", async () => {
  for (const body of [frame(0, "only a message"), frame(0x80, "grpc-message: no status\r\n"), frame(0x80, "grpc-status: 99\r\n"), Buffer.alloc(0)]) {
    const seen: number[] = [];
    for await (const _ of watchingGrpcWebStatus(split(body, 3), (code) => seen.push(code))) void _;
    assert.equal(seen, []);
  }
});

test("a compressed trailer frame (flag 0x81, 1 KiB or more) is read through the answer's grpc-encoding", async () => {
  const trailer = Buffer.from(`grpc-status: 3\r\ngrpc-message: ${"k".repeat(2000)}\r\n`, "latin1");
  for (const [encoding, compressed] of [
    ["gzip", gzipSync(trailer)],
    ["br", brotliCompressSync(trailer)],
  ] as const) {
    const head = Buffer.alloc(5);
    head[0] = 0x81;
    head.writeUInt32BE(compressed.length, 1);
    const body = Buffer.concat([frame(0, "a message"), head, compressed]);
    const seen: number[] = [];
    const out: Buffer[] = [];
    for await (const chunk of watchingGrpcWebStatus(split(body, 7), (code) => seen.push(code), encoding)) out.push(Buffer.from(chunk));
    assert.equal(seen, [3], encoding);
    assert.equal(Buffer.concat(out), body, encoding);
  }
});

test.run();

// The one-port server's HTTP/1.1 side, on a real socket: answers queued
// behind another on a connection that dies still close, so that whatever
// waits for them (a call's place at the gate, its log line) is let go.
import net from "node:net";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { createOnePortServer } from "../../src/net/one-port-server.js";

test("pipelined answers still queued when their connection dies are closed, each once", async () => {
  const closes = new Map<string, number>();
  const server = createOnePortServer(
    (req, res) => {
      const key = (req as { url?: string }).url ?? "";
      res.once("close", () => closes.set(key, (closes.get(key) ?? 0) + 1));
      // Answered after the client has gone.
      setTimeout(() => res.end("x"), 300);
    },
    { idleTimeoutMs: 5_000 },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const socket = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write(["/a", "/b", "/c"].map((p) => `GET ${p} HTTP/1.1\r\nHost: x\r\n\r\n`).join(""));
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 800));
    assert.equal(Object.fromEntries(closes), { "/a": 1, "/b": 1, "/c": 1 });
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test.run();

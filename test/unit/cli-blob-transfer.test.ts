// The CLI's blob transfers against a store that accepts a connection and
// then says nothing: given up on once no byte has moved for the stall
// time, rather than held for ever.
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { downloadFile, uploadFile } from "../../src/cli/blob-transfer.js";
import { CliError } from "../../src/cli/cli-error.js";

/**
 * A server that takes connections (and whatever is sent on them) and never
 * answers, or (`halfAnswer`) answers a blob's headers and the first bytes
 * of its body, then nothing more.
 */
async function silentStore(halfAnswer = false): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.resume();
    if (halfAnswer) {
      socket.once("data", () =>
        socket.write(
          "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nContent-Type: application/octet-stream\r\nx-ms-blob-type: BlockBlob\r\nETag: \"0x1\"\r\nContent-Range: bytes 0-1023/1024\r\n\r\n" + "x".repeat(100),
        ),
      );
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/devstoreaccount1/packages/e/v.tgz?sv=2024-08-04&sig=secret`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** `work`, or a failure once it has taken 10 s: without the stall watch it would never end. */
function within10s<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("still waiting after 10 s")), 10_000)));
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** A store answering each request as `handler` does once its body has come, at a blob URL of its own. */
async function httpStore(handler: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => handler(req, res));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/devstoreaccount1/packages/e/v.tgz?sv=2024-08-04&sig=secret`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "ev-cli-blob-"));

for (const [name, transfer] of [
  [
    "upload",
    (url: string) => {
      const file = path.join(scratch, "pkg.tgz");
      fs.writeFileSync(file, Buffer.alloc(1024, 1));
      return uploadFile(url, file, 1024, "AAAAAAAAAAAAAAAAAAAAAA==", "package", true, { stallMs: 300 });
    },
  ],
  ["download", (url: string) => downloadFile(url, path.join(scratch, "out.part"), 1024, "download", true, { stallMs: 300 })],
] as const) {
  test(`${name}: a blob store that never answers is given up on after the stall time, saying so and what to do`, async () => {
    const store = await silentStore();
    try {
      await within10s<unknown>(transfer(store.url));
      assert.unreachable("a store that never answers cannot have taken the transfer");
    } catch (error) {
      assert.instance(error, CliError);
      assert.is((error as CliError).code, "BLOB_TRANSFER_FAILED");
      assert.match((error as Error).message, "moved no byte and gave no answer for 0.3 s");
      assert.match((error as Error).message, "run the command again");
      assert.not.match((error as Error).message, "secret", "the signature is never said");
    } finally {
      await store.close();
    }
  });
}

test("download: a body that stops part-way is given up on after the stall time", async () => {
  const store = await silentStore(true);
  try {
    await within10s(downloadFile(store.url, path.join(scratch, "half.part"), 1024, "download", true, { stallMs: 300 }));
    assert.unreachable("a body that never ends cannot have been downloaded");
  } catch (error) {
    assert.instance(error, CliError);
    assert.match((error as Error).message, "moved no byte and gave no answer for 0.3 s", (error as Error).message);
  } finally {
    await store.close();
  }
});

test("upload: a large package's blocks, whose progress the SDK reports only once each is in, are not taken for a stall", async () => {
  // Each request is answered a second after its body has come: longer than the stall time.
  const store = await httpStore((_req, res) => setTimeout(() => res.writeHead(201, { etag: '"0x1"', "x-ms-request-id": "r" }).end(), 1000));
  const file = path.join(scratch, "blocks.tgz");
  const size = 9 * 1024 * 1024;
  fs.writeFileSync(file, Buffer.alloc(size, 1));
  try {
    await within10s(uploadFile(store.url, file, size, "AAAAAAAAAAAAAAAAAAAAAA==", "package", true, { stallMs: 300 }));
  } finally {
    await store.close();
  }
});

test("upload: once one block has failed, the others still in flight are given up on with it, not left holding the process", async () => {
  // The first block is refused (an expired URL) once a second is in
  // flight, so that there are blocks to give up on; the others are never
  // answered.
  let requests = 0;
  let first: http.ServerResponse | undefined;
  const held = new Set<net.Socket>();
  const store = await httpStore((req, res) => {
    if (requests++ === 0) {
      first = res;
      return;
    }
    held.add(req.socket);
    req.socket.once("close", () => held.delete(req.socket));
    if (requests === 2) first!.writeHead(403, { "x-ms-error-code": "AuthenticationFailed" }).end();
  });
  const file = path.join(scratch, "refused-blocks.tgz");
  const size = 16 * 1024 * 1024;
  fs.writeFileSync(file, Buffer.alloc(size, 1));
  try {
    await within10s(uploadFile(store.url, file, size, "AAAAAAAAAAAAAAAAAAAAAA==", "package", true, { stallMs: 60_000 }));
    assert.unreachable("a refused block fails the upload");
  } catch (error) {
    assert.instance(error, CliError);
    assert.match((error as Error).message, "HTTP 403");
  }
  try {
    const until = Date.now() + 3_000;
    while ((held.size > 0 || requests < 2) && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(requests > 1, `${requests} requests: the other blocks were sent`);
    assert.is(held.size, 0, "the blocks still in flight were given up on: their connections closed");
  } finally {
    await store.close();
  }
});

test.after(() => fs.rmSync(scratch, { recursive: true, force: true }));

test.run();

import { promisify } from "node:util";
import { brotliDecompress, gunzip } from "node:zlib";

const inflaters = new Map<string, (bytes: Buffer) => Promise<Buffer>>([
  ["gzip", promisify(gunzip)],
  ["br", promisify(brotliDecompress)],
]);

/**
 * The status a gRPC-Web answer ends with, read from its body as it is
 * sent. Why: gRPC-Web carries its status in the body's last frame (the
 * trailer frame, flag 0x80; PROTOCOL-WEB.md), not in HTTP trailers, so a
 * call Connect refuses before any interceptor runs (a truncated message)
 * would otherwise be counted and logged with no code at all. `encoding`
 * is the answer's grpc-encoding: a trailer frame of 1 KiB or more is
 * compressed with it (Connect's compressMinBytes), its flag 0x81.
 */
export async function* watchingGrpcWebStatus(body: AsyncIterable<Uint8Array>, onStatus: (code: number) => void, encoding?: string | null): AsyncGenerator<Uint8Array> {
  // Frames may be split or joined across chunks: read by their length
  // prefixes, keeping only the trailer frame's bytes.
  let head = Buffer.alloc(0);
  let skip = 0;
  let trailer: Buffer[] | undefined;
  let trailerLeft = 0;
  let compressed = false;
  for await (const chunk of body) {
    yield chunk;
    let at = 0;
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (at < bytes.length) {
      if (skip > 0) {
        const taken = Math.min(skip, bytes.length - at);
        skip -= taken;
        at += taken;
        continue;
      }
      if (trailer !== undefined && trailerLeft > 0) {
        const taken = Math.min(trailerLeft, bytes.length - at);
        trailer.push(bytes.subarray(at, at + taken));
        trailerLeft -= taken;
        at += taken;
        if (trailerLeft === 0) await report(Buffer.concat(trailer), compressed, encoding, onStatus);
        continue;
      }
      const need = 5 - head.length;
      head = Buffer.concat([head, bytes.subarray(at, at + need)]);
      at += Math.min(need, bytes.length - at);
      if (head.length < 5) break;
      const length = head.readUInt32BE(1);
      if ((head[0]! & 0x80) !== 0) {
        trailer = [];
        trailerLeft = length;
        compressed = (head[0]! & 0x01) !== 0;
        if (length === 0) await report(Buffer.alloc(0), false, encoding, onStatus);
      } else {
        skip = length;
      }
      head = Buffer.alloc(0);
    }
  }
}

async function report(trailer: Buffer, compressed: boolean, encoding: string | null | undefined, onStatus: (code: number) => void): Promise<void> {
  let text: string;
  if (compressed) {
    const inflate = encoding === null || encoding === undefined ? undefined : inflaters.get(encoding);
    // Not one this server compresses with: nothing to read, nothing to name.
    if (inflate === undefined) return;
    try {
      text = (await inflate(trailer)).toString("latin1");
    } catch {
      return;
    }
  } else {
    text = trailer.toString("latin1");
  }
  const status = /^grpc-status: ?(\d+)\r?$/im.exec(text)?.[1];
  // Only the codes gRPC defines (0 to 16): the callback names them.
  if (status !== undefined && Number(status) <= 16) onStatus(Number(status));
}

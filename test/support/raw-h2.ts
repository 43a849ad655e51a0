import http2 from "node:http2";
import net from "node:net";
import { createRegistry, fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";

/** One HTTP/2 frame as received: its type, flags, stream and payload (RFC 9113, 4.1). */
export interface RawFrame {
  readonly type: number;
  readonly flags: number;
  readonly stream: number;
  readonly payload: Buffer;
}

export const frameType = { data: 0x0, headers: 0x1, rstStream: 0x3, settings: 0x4, goaway: 0x7 } as const;
export const flag = { endStream: 0x1, ack: 0x1, endHeaders: 0x4 } as const;

function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** An HPACK header block of literals without indexing or Huffman coding (RFC 7541, 6.2.2): the simplest a server must read. */
function headerBlock(headers: ReadonlyArray<readonly [string, string]>): Buffer {
  const length = (n: number) => {
    if (n < 127) return Buffer.from([n]);
    const bytes = [127];
    for (n -= 127; n >= 128; n >>= 7) bytes.push((n & 127) | 128);
    bytes.push(n);
    return Buffer.from(bytes);
  };
  return Buffer.concat(headers.flatMap(([name, value]) => [Buffer.from([0]), length(name.length), Buffer.from(name), length(Buffer.byteLength(value)), Buffer.from(value)]));
}

/**
 * A bare HTTP/2 client over one TCP connection that records every frame
 * the server sends: what Node's and curl's clients hide, such as an
 * RST_STREAM after a stream has ended, can then be seen.
 */
export class RawH2 {
  readonly frames: RawFrame[] = [];
  #buffer = Buffer.alloc(0);

  private constructor(private readonly socket: net.Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.#buffer = Buffer.concat([this.#buffer, chunk]);
      while (this.#buffer.length >= 9) {
        const length = this.#buffer.readUIntBE(0, 3);
        if (this.#buffer.length < 9 + length) break;
        const f = { type: this.#buffer[3]!, flags: this.#buffer[4]!, stream: this.#buffer.readUInt32BE(5) & 0x7fffffff, payload: this.#buffer.subarray(9, 9 + length) };
        this.#buffer = this.#buffer.subarray(9 + length);
        this.frames.push(f);
        if (f.type === frameType.settings && (f.flags & flag.ack) === 0) socket.write(frame(frameType.settings, flag.ack, 0));
      }
    });
  }

  /** Connects with prior knowledge: the preface and empty SETTINGS. */
  static async connect(url: string): Promise<RawH2> {
    const { hostname, port } = new URL(url);
    const socket = net.connect(Number(port), hostname);
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    socket.write(Buffer.concat([Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(frameType.settings, 0, 0)]));
    return new RawH2(socket);
  }

  /**
   * Opens `stream` with these headers, in one write with its whole `body`
   * (ended), or with none: ended at once when `body` is "", left open for
   * a body that never comes when it is undefined.
   */
  request(stream: number, headers: ReadonlyArray<readonly [string, string]>, body: string | undefined): void {
    const open = frame(frameType.headers, flag.endHeaders | (body === "" ? flag.endStream : 0), stream, headerBlock(headers));
    this.socket.write(body === undefined || body === "" ? open : Buffer.concat([open, frame(frameType.data, flag.endStream, stream, Buffer.from(body))]));
  }

  /** Sends the rest of a stream's body, ending it. */
  end(stream: number, body: string): void {
    this.socket.write(frame(frameType.data, flag.endStream, stream, Buffer.from(body)));
  }

  /** Resets a stream (RST_STREAM with this error code; CANCEL, 8, as clients that give up on a call send). */
  reset(stream: number, code = 8): void {
    const payload = Buffer.alloc(4);
    payload.writeUInt32BE(code);
    this.socket.write(frame(frameType.rstStream, 0, stream, payload));
  }

  /** The frames received on one stream. */
  on(stream: number): RawFrame[] {
    return this.frames.filter((f) => f.stream === stream);
  }

  /** Waits until `done` holds of the frames received, for at most `ms`. */
  async until(done: (frames: readonly RawFrame[]) => boolean, ms = 5_000): Promise<boolean> {
    for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 10))) if (done(this.frames)) return true;
    return done(this.frames);
  }

  close(): void {
    this.socket.destroy();
  }
}

/**
 * The grpc-status a gRPC call on a node:http2 client stream ended with
 * (from its headers, for a Trailers-Only answer, or its trailers), once
 * the stream closes; "no status" when none came. Reads and drops the body.
 */
export function grpcStatusOf(req: http2.ClientHttp2Stream): Promise<string> {
  return new Promise((resolve) => {
    let status = "no status";
    req.on("response", (h) => (status = String(h["grpc-status"] ?? status)));
    req.on("trailers", (h) => (status = String(h["grpc-status"] ?? status)));
    req.on("error", () => {});
    req.on("close", () => resolve(status));
    req.resume();
  });
}

/** The HTTP status and body text a node:http2 client stream was answered with, once it closes (status 0 when no headers came). */
export function answerOf(req: http2.ClientHttp2Stream): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    let status = 0;
    let text = "";
    req.on("response", (h) => (status = Number(h[":status"])));
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.on("error", () => {});
    req.on("close", () => resolve({ status, text }));
  });
}

/** How a gRPC stream first answered: with a message, or refused with a status and its ErrorInfo's metadata. */
export type FirstAnswer = { readonly served: true } | { readonly served: false; readonly status: string; readonly metadata: Record<string, string> };

/**
 * Opens a health Watch (of the server as a whole) on `session`, with the
 * stream left open and read: how it first answered, once it has.
 */
export function healthWatch(session: http2.ClientHttp2Session): { readonly stream: http2.ClientHttp2Stream; readonly first: Promise<FirstAnswer> } {
  const stream = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
  const first = new Promise<FirstAnswer>((resolve) => {
    const refused = (h: http2.IncomingHttpHeaders) => {
      if (h["grpc-status"] === undefined) return;
      const bin = h["grpc-status-details-bin"];
      let metadata: Record<string, string> = {};
      if (typeof bin === "string") {
        for (const any of fromBinary(StatusSchema, Buffer.from(bin, "base64")).details) {
          const info = anyUnpack(any, createRegistry(ErrorInfoSchema));
          if (info?.$typeName === ErrorInfoSchema.typeName) metadata = (info as unknown as { metadata: Record<string, string> }).metadata;
        }
      }
      resolve({ served: false, status: String(h["grpc-status"]), metadata });
    };
    stream.on("response", refused);
    stream.on("trailers", refused);
    stream.once("data", () => resolve({ served: true }));
    stream.on("close", () => resolve({ served: false, status: "no status", metadata: {} }));
  });
  stream.on("error", () => {});
  stream.resume();
  // The empty request: the server as a whole.
  stream.end(Buffer.alloc(5));
  return { stream, first };
}

/**
 * An HTTP/2 session to `url` from `localAddress` (Linux routes all of
 * 127/8 to the loopback): another client, as the server counts clients.
 * Node's types do not let http2.connect take a local address; its socket does.
 */
export function sessionFrom(url: string, localAddress: string, settings: http2.Settings = {}): http2.ClientHttp2Session {
  const { hostname, port } = new URL(url);
  const session = http2.connect(url, { settings, createConnection: () => net.connect({ host: hostname, port: Number(port), localAddress }) });
  session.on("error", () => {});
  return session;
}

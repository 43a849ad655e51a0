// A bare HTTP/1.1 keep-alive client, for the fixed-rate row and the
// confirms: it shares the two cores with the service it measures, so every
// microsecond it spends is taken from the service. undici took ~0.3 cores
// at 3,600 requests a second; this writes a prepared request and reads the
// status line and Content-Length, nothing more.
import net from "node:net";

/** What one GET got back. */
export interface LeanResponse {
  readonly status: number;
  readonly body: Buffer;
}

interface Pending {
  resolve(res: LeanResponse): void;
  reject(error: Error): void;
}

/** One keep-alive connection: one request at a time. */
class Connection {
  readonly #socket: net.Socket;
  #pending: Pending | undefined;
  #buffer: Buffer = Buffer.alloc(0);
  #head: { status: number; length: number; bodyStart: number } | undefined;
  #broken: Error | undefined;

  constructor(host: string, port: number) {
    this.#socket = net.connect({ host, port, noDelay: true });
    this.#socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    const fail = (error: Error) => {
      this.#broken = error;
      const p = this.#pending;
      this.#pending = undefined;
      p?.reject(error);
    };
    this.#socket.on("error", fail);
    this.#socket.on("close", () => fail(new Error("connection closed")));
  }

  get usable(): boolean {
    return this.#broken === undefined;
  }

  send(request: Buffer): Promise<LeanResponse> {
    return new Promise((resolve, reject) => {
      if (this.#broken !== undefined) return reject(this.#broken);
      this.#pending = { resolve, reject };
      this.#socket.write(request);
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  #onData(chunk: Buffer): void {
    this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
    if (this.#head === undefined) {
      const end = this.#buffer.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = this.#buffer.toString("latin1", 0, end);
      const status = Number(head.slice(9, 12));
      const length = /\r\ncontent-length: *(\d+)/i.exec(head);
      if (length === null) {
        this.#broken = new Error("a response without Content-Length");
        this.#socket.destroy(this.#broken);
        return;
      }
      this.#head = { status, length: Number(length[1]), bodyStart: end + 4 };
    }
    const { status, length, bodyStart } = this.#head;
    if (this.#buffer.length < bodyStart + length) return;
    const body = this.#buffer.subarray(bodyStart, bodyStart + length);
    this.#buffer = this.#buffer.subarray(bodyStart + length);
    this.#head = undefined;
    const p = this.#pending;
    this.#pending = undefined;
    p?.resolve({ status, body });
  }
}

/** A pool of keep-alive connections to one origin, for requests with fixed headers. */
export class LeanHttp1 {
  readonly #host: string;
  readonly #port: number;
  readonly #headerLines: string;
  readonly #idle: Connection[] = [];
  readonly #all = new Set<Connection>();

  constructor(origin: string, headers: Record<string, string>) {
    const url = new URL(origin);
    this.#host = url.hostname;
    this.#port = Number(url.port);
    this.#headerLines = `host: ${url.host}\r\n${Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join("")}`;
  }

  get(path: string): Promise<LeanResponse> {
    return this.#send(Buffer.from(`GET ${path} HTTP/1.1\r\n${this.#headerLines}\r\n`, "latin1"));
  }

  /** A POST of a JSON body. */
  post(path: string, json: string): Promise<LeanResponse> {
    const body = Buffer.from(json);
    const head = `POST ${path} HTTP/1.1\r\n${this.#headerLines}content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`;
    return this.#send(Buffer.concat([Buffer.from(head, "latin1"), body]));
  }

  async #send(request: Buffer): Promise<LeanResponse> {
    let connection = this.#idle.pop();
    while (connection !== undefined && !connection.usable) {
      this.#all.delete(connection);
      connection = this.#idle.pop();
    }
    if (connection === undefined) {
      connection = new Connection(this.#host, this.#port);
      this.#all.add(connection);
    }
    try {
      return await connection.send(request);
    } finally {
      if (connection.usable) this.#idle.push(connection);
      else this.#all.delete(connection);
    }
  }

  close(): void {
    for (const c of this.#all) c.close();
    this.#all.clear();
    this.#idle.length = 0;
  }
}

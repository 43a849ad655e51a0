// A TCP proxy in front of MySQL that, once armed, passes the next COMMIT
// on to the server and then cuts the client's connection: the commit lands,
// its answer never arrives. What a network failure at the worst moment does,
// made to happen on purpose.
import net from "node:net";

/** MySQL's COM_QUERY command byte. */
const comQuery = 0x03;

/** A proxy to one MySQL server; `url()` is the server's URL with the proxy's port. */
export class CommitDroppingProxy {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  #armed = false;
  /** How many COMMITs were cut off. */
  dropped = 0;

  private constructor(
    server: net.Server,
    readonly target: URL,
  ) {
    this.#server = server;
  }

  /** Starts a proxy on a free port to the server of `mysqlUrl`. */
  static async start(mysqlUrl: string): Promise<CommitDroppingProxy> {
    const target = new URL(mysqlUrl);
    const server = net.createServer();
    const proxy = new CommitDroppingProxy(server, target);
    server.on("connection", (client) => proxy.#pipe(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  /** The database URL that goes through the proxy. */
  url(): string {
    const url = new URL(this.target);
    url.hostname = "127.0.0.1";
    url.port = String((this.#server.address() as net.AddressInfo).port);
    return url.toString();
  }

  /** Cuts the connection of the next COMMIT, once. */
  arm(): void {
    this.#armed = true;
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #pipe(client: net.Socket): void {
    const server = net.connect(Number(this.target.port || 3306), this.target.hostname);
    this.#sockets.add(client).add(server);
    const forget = () => {
      this.#sockets.delete(client);
      this.#sockets.delete(server);
      client.destroy();
      server.destroy();
    };
    client.on("close", forget).on("error", forget);
    server.on("close", forget).on("error", forget);
    server.on("data", (chunk: Buffer) => client.write(chunk));
    // Client packets: a 3-byte little-endian length, a sequence byte, then the payload.
    let pending = Buffer.alloc(0);
    client.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4) {
        const length = pending.readUIntLE(0, 3);
        if (pending.length < 4 + length) break;
        const packet = pending.subarray(0, 4 + length);
        pending = pending.subarray(4 + length);
        const isCommit = length > 1 && packet[4] === comQuery && /^\s*COMMIT\b/i.test(packet.subarray(5).toString("latin1"));
        server.write(packet);
        if (isCommit && this.#armed) {
          this.#armed = false;
          this.dropped++;
          // The COMMIT reaches the server before its connection ends; the client never hears back.
          server.end();
          client.destroy();
          return;
        }
      }
    });
  }
}

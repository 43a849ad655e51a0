// A MariaDB server of the test's own (own data folder and port), so fault
// tests can kill and restart a real database without touching the shared
// one the other suites use.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import knexFactory from "knex";

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Tests and suites left out for want of the MariaDB server binaries, by name. */
const leftOut: string[] = [];

/** A private mariadbd, killable and restartable on the same data and port. */
export class PrivateMariaDb {
  #child: ChildProcess | undefined;

  /** Notes a test or suite left out because available() is false: the contract's registration names them all (test/contract/index.ts). */
  static leaveOut(name: string): void {
    leftOut.push(name);
  }

  /** What leaveOut() was told, in order. */
  static leftOut(): readonly string[] {
    return leftOut;
  }

  private constructor(
    readonly dir: string,
    readonly port: number,
    readonly serverOptions: readonly string[],
  ) {}

  /** Whether the machine has the MariaDB server binaries (found, not run: without --datadir they touch the system's). */
  static available(): boolean {
    const onPath = (name: string) => (process.env["PATH"] ?? "").split(":").some((dir) => dir !== "" && fs.existsSync(path.join(dir, name)));
    return fs.existsSync("/usr/sbin/mariadbd") && onPath("mariadb-install-db");
  }

  /** `serverOptions`: more mariadbd options, e.g. a default a newer MariaDB has. */
  static async start(serverOptions: readonly string[] = []): Promise<PrivateMariaDb> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-mariadb-"));
    const install = spawnSync(
      "mariadb-install-db",
      ["--no-defaults", `--datadir=${dir}/data`, "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root"],
      { encoding: "utf8" },
    );
    if (install.status !== 0) throw new Error(`mariadb-install-db failed: ${install.stderr}`);
    const db = new PrivateMariaDb(dir, await freePort(), serverOptions);
    await db.startServer();
    const admin = knexFactory({ client: "mysql2", connection: db.url("mysql"), pool: { min: 0, max: 1 } });
    await admin.raw("CREATE DATABASE IF NOT EXISTS test").finally(() => admin.destroy());
    return db;
  }

  /** DATABASE_URL of a database on this server. */
  url(database = "test"): string {
    return `mysql://root:@127.0.0.1:${this.port}/${database}`;
  }

  /** Starts mariadbd (again) and waits until it answers. */
  async startServer(): Promise<void> {
    this.#child = spawn(
      "/usr/sbin/mariadbd",
      [
        "--no-defaults",
        `--datadir=${this.dir}/data`,
        `--port=${this.port}`,
        "--bind-address=127.0.0.1",
        `--socket=${this.dir}/sock`,
        `--pid-file=${this.dir}/pid`,
        `--log-error=${this.dir}/error.log`,
        "--user=root",
        "--skip-log-bin",
        "--innodb-buffer-pool-size=32M",
        ...this.serverOptions,
      ],
      { stdio: "ignore" },
    );
    const deadline = Date.now() + 30_000;
    for (;;) {
      const quiet = () => undefined;
      const k = knexFactory({ client: "mysql2", connection: this.url("mysql"), pool: { min: 0, max: 1 }, log: { warn: quiet, error: quiet, debug: quiet, deprecate: quiet } });
      try {
        await k.raw("select 1");
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`private MariaDB did not start: ${fs.readFileSync(`${this.dir}/error.log`, "utf8").slice(-1000)}`, { cause: error });
        await new Promise((r) => setTimeout(r, 100));
      } finally {
        await k.destroy();
      }
    }
  }

  /** Kills mariadbd at once (SIGKILL), as a crash would. */
  async kill(): Promise<void> {
    await this.#signal("SIGKILL");
  }

  /**
   * Freezes mariadbd (SIGSTOP): connections stay open and nothing answers,
   * as a hung server. Returns once every thread of it has stopped: a stop
   * signal takes effect thread by thread, and on a loaded machine a query
   * sent right after kill() could still be answered.
   */
  freeze(): void {
    this.#child?.kill("SIGSTOP");
    this.#waitForState((state) => state === "T", "stopped");
  }

  /** Lets a frozen mariadbd go on (SIGCONT), and returns once it runs again. */
  thaw(): void {
    this.#child?.kill("SIGCONT");
    this.#waitForState((state) => state !== "T", "running");
  }

  /** Waits (a few milliseconds at most, in practice) until every thread's state, as /proc says it, is what `wanted` takes. */
  #waitForState(wanted: (state: string) => boolean, what: string): void {
    const pid = this.#child?.pid;
    if (pid === undefined || this.#child!.exitCode !== null || this.#child!.signalCode !== null) return;
    const states = () => {
      try {
        // The state follows the name in parentheses, which may itself hold spaces.
        return fs.readdirSync(`/proc/${pid}/task`).map((tid) => /\) (\S)/.exec(fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8"))?.[1] ?? "?");
      } catch {
        return undefined; // gone, or no /proc: nothing to wait for
      }
    };
    const deadline = Date.now() + 5_000;
    for (let now = states(); now !== undefined && !now.every(wanted); now = states()) {
      if (Date.now() > deadline) throw new Error(`mariadbd ${pid} not ${what} after 5 s: thread states ${now.join("")}`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }

  /** Stops mariadbd cleanly. */
  async stop(): Promise<void> {
    await this.#signal("SIGTERM");
  }

  async #signal(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill(signal);
    await exited;
  }

  /** Stops the server and removes its data. */
  async destroy(): Promise<void> {
    this.thaw();
    await this.kill();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

import { type ChildProcess, spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { makeDirectory } from "../ops/make-directory.js";

/**
 * Azurite's account and key: public, the same in every copy of the
 * emulator, and accepted by nothing but an emulator.
 */
export const azuriteAccount = "devstoreaccount1";
export const azuriteKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/** A running Azurite blob service. */
export interface EmbeddedAzurite {
  readonly blobEndpoint: string;
  /** The emulator's process, for the benchmark's CPU accounting. */
  readonly pid: number | undefined;
  readonly connectionString: string;
  /**
   * Stops the emulator (SIGTERM: Azurite saves and exits); resolves once its
   * process has exited, with whether it had to be killed after 5 s.
   */
  stop(): Promise<{ readonly killed: boolean }>;
  /**
   * Settles with why, when the emulator exits without being asked (a
   * crash, the kernel's out-of-memory killer): every upload, download and
   * confirm would fail from then on, and no retry could mend it.
   */
  readonly exited: Promise<string>;
}

/** Where to run Azurite. */
export interface EmbeddedAzuriteOptions {
  /** Data folder; omitted means in memory. */
  readonly location?: string;
  /** 0 takes a free port. */
  readonly port?: number;
  readonly host?: string;
}

function azuriteMain(): string {
  const require = createRequire(import.meta.url);
  let pkg: string;
  try {
    pkg = require.resolve("azurite/package.json");
  } catch {
    throw new Error(
      "AZURE_STORAGE_CONNECTION_STRING is not set and the embedded Azurite is not installed (it is a dev dependency): " +
        "run `npm install` without --omit=dev, or set AZURE_STORAGE_CONNECTION_STRING.",
    );
  }
  return path.join(path.dirname(pkg), "dist", "src", "blob", "main.js");
}

/**
 * Run in the emulator's process before Azurite. Azurite saves its index of
 * blobs every 5 s and on SIGTERM (its graceful stop), never on SIGKILL, so
 * every stop here is a SIGTERM:
 * - once its parent's end of stdin is gone, it sends itself one. The pipe
 *   does not keep the emulator alive (unref): Azurite's stop waits for its
 *   event loop to empty, and a stdin kept open held each graceful stop
 *   until the service killed it.
 * - a SIGTERM after the first is ignored: Azurite listens for one only, and
 *   a second (the service's and the pipe's, when the service exits) would
 *   otherwise kill it in the middle of its save.
 * - one before Azurite listens (it is still starting: nothing to save) ends
 *   the process, as it would have without this listener.
 * - a stop that hangs ends after 10 s: nothing else would, once the service
 *   is gone, and the emulator would hold the data folder.
 */
const stopOnlyGracefully = [
  `process.stdin.on("end", () => process.kill(process.pid, "SIGTERM")); process.stdin.resume(); process.stdin.unref();`,
  `let stopping = false;`,
  `process.on("SIGTERM", () => {`,
  `  if (stopping) return; stopping = true;`,
  `  if (process.listenerCount("SIGTERM") === 1) process.exit(0);`,
  `  setTimeout(() => process.exit(1), 10000).unref();`,
  `});`,
].join("\n");

/**
 * Starts Azurite's blob service as a child process (it has no programmatic
 * API, and in-process it would stall whenever the service's own thread is
 * busy). It is asked to stop (SIGTERM) when this process exits, and stops
 * by itself when this process is killed.
 */
export async function startEmbeddedAzurite(options: EmbeddedAzuriteOptions = {}): Promise<EmbeddedAzurite> {
  const host = options.host ?? "127.0.0.1";
  const args = [
    azuriteMain(),
    "--blobHost",
    host,
    "--blobPort",
    String(options.port ?? 0),
    "--skipApiVersionCheck",
    "--disableTelemetry",
    // No access log: nobody reads the emulator's stdout, and a line per
    // request cost it CPU on the cores the service runs on.
    "--silent",
  ];
  if (options.location === undefined) args.push("--inMemoryPersistence");
  else {
    makeDirectory(options.location);
    args.push("--location", options.location);
  }
  // Its stdin is a pipe from this process, which the kernel closes however
  // this process ends, SIGKILL included: the emulator then stops itself as
  // on SIGTERM (saving its index), rather than live on with the data folder
  // that a restart would open a second emulator on. The emulator's own end
  // is another matter: a SIGKILL of it (the out-of-memory killer, a
  // container's processes killed together) loses the blobs written since
  // its last save, up to 5 s before; the service's start names any version
  // whose package is missing (see lostPackages).
  const child: ChildProcess = spawn(process.execPath, [`--import=data:text/javascript,${encodeURIComponent(stopOnlyGracefully)}`, ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    // Its own process group: a terminal's Ctrl-C reaches the service alone,
    // which drains its requests with the emulator still answering, then
    // stops it.
    detached: true,
  });
  // An exit that did not go through stop() (process.exit, an uncaught
  // error) cannot wait for the emulator: SIGTERM lets it save on its own
  // (a SIGKILL would lose what it has not saved yet).
  const stopOnExit = () => child.kill("SIGTERM");
  process.once("exit", stopOnExit);

  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => fail(new Error(`Azurite did not start within 30 s: ${out.slice(-500)}`)), 30_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /Blob service (?:is )?successfully list\w+ (?:at|on) https?:\/\/[^:\s]+:(\d+)/.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        child.stdout?.off("data", onData);
        child.stdout?.resume();
        child.stderr?.resume();
        resolve(Number(m[1]));
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.once("exit", (code) => fail(new Error(`Azurite exited with code ${code} before it started: ${out.slice(-500)}`)));
    child.once("error", fail);
  });

  const blobEndpoint = `http://${host}:${port}/${azuriteAccount}`;
  let stopping = false;
  const exited = new Promise<string>((resolve) =>
    child.once("exit", (code, signal) => {
      if (!stopping) resolve(`the embedded Azurite exited (${signal ?? `code ${code}`}); start the service again (its start names any version whose package the emulator lost)`);
    }),
  );
  return {
    exited,
    blobEndpoint,
    pid: child.pid,
    connectionString: `DefaultEndpointsProtocol=http;AccountName=${azuriteAccount};AccountKey=${azuriteKey};BlobEndpoint=${blobEndpoint};`,
    stop: () =>
      new Promise<{ killed: boolean }>((resolve) => {
        stopping = true;
        process.off("exit", stopOnExit);
        if (child.exitCode !== null || child.signalCode !== null) return resolve({ killed: child.signalCode === "SIGKILL" });
        child.once("exit", (_code, signal) => resolve({ killed: signal === "SIGKILL" }));
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 5_000).unref();
      }),
  };
}

import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

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
 * Run in the emulator's process before Azurite: stop (SIGTERM, Azurite's
 * graceful stop) once its parent's end of stdin is gone. The pipe does not
 * keep the emulator alive (unref): Azurite's stop waits for its event loop
 * to empty, and a stdin kept open held each graceful stop until the
 * service killed it.
 */
const stopWhenOrphaned = `process.stdin.on("end", () => process.kill(process.pid, "SIGTERM")); process.stdin.resume(); process.stdin.unref();`;

/**
 * Starts Azurite's blob service as a child process (it has no programmatic
 * API, and in-process it would stall whenever the service's own thread is
 * busy). It is killed when this process exits, and stops by itself when
 * this process is killed.
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
    fs.mkdirSync(options.location, { recursive: true });
    args.push("--location", options.location);
  }
  // Its stdin is a pipe from this process, which the kernel closes however
  // this process ends, SIGKILL included: the emulator then stops itself as
  // on SIGTERM (saving its data), rather than live on with the data folder
  // that a restart would open a second emulator on.
  const child: ChildProcess = spawn(process.execPath, [`--import=data:text/javascript,${encodeURIComponent(stopWhenOrphaned)}`, ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    // Its own process group: a terminal's Ctrl-C reaches the service alone,
    // which drains its requests with the emulator still answering, then
    // stops it.
    detached: true,
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

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
      if (!stopping) resolve(`the embedded Azurite exited (${signal ?? `code ${code}`}); start the service again`);
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
        process.off("exit", killOnExit);
        if (child.exitCode !== null || child.signalCode !== null) return resolve({ killed: child.signalCode === "SIGKILL" });
        child.once("exit", (_code, signal) => resolve({ killed: signal === "SIGKILL" }));
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 5_000).unref();
      }),
  };
}

import os from "node:os";
import { createApp } from "./app.js";
import { ConfigError, loadConfig } from "./config.js";
import { databaseHintSettings, messageWithCauses, startupHint } from "./ops/startup-hint.js";

/** The reason a start is given up when the process is asked to stop during it. */
class StoppedWhileStarting extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`stopped by ${signal} while starting`);
  }
}

// Reads the configuration, starts the service and stops it on SIGTERM or
// SIGINT; everything else lives in app.ts and server.ts.
let config;
try {
  config = loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  process.stderr.write(`entity-versions: configuration error: ${error.message}\n`);
  process.exit(2);
}

// A stop asked for while the service starts (a rollout superseded, a node
// drained) is taken between two migrations, so that it never leaves their
// lock held for every later start to wait on. Once it serves, a signal
// drains and stops it; a second signal, at either stage, ends it at once.
// A signal within a second of the first is the same stop, not a second
// one: one Ctrl-C reaches the service twice under `npm start` (the
// terminal signals npm and the service, and npm passes its own copy on),
// as does a SIGTERM to a process group that npm leads (systemd, dumb-init).
// One listener per signal for the whole run, never swapped for another:
// Node stops watching a signal when its last listener is removed, and one
// that had arrived but was not yet read (the event loop reads signals
// between callbacks) was then lost, leaving the service running.
const startStop = new AbortController();
let stop: ((signal: NodeJS.Signals) => void) | undefined;
const sameStopMs = 1_000;
let signalledAt: number | undefined;
const onSignal = (signal: NodeJS.Signals) => {
  const now = performance.now();
  if (signalledAt !== undefined && now - signalledAt < sameStopMs) return;
  if (signalledAt !== undefined) {
    process.stderr.write(`entity-versions: ${signal} again: stopping at once, without finishing the calls in flight.\n`);
    // The shell's code for a death by this signal; an exit (not the signal's
    // default action) also stops the embedded Azurite, and it happens even
    // as a container's PID 1, which a signal without a handler never kills.
    // The data folder's claim is given back on exit too (see lockDataDir).
    process.exit(128 + os.constants.signals[signal]);
  }
  signalledAt = now;
  if (stop === undefined) startStop.abort(new StoppedWhileStarting(signal));
  else stop(signal);
};
process.on("SIGTERM", onSignal);
process.on("SIGINT", onSignal);

let app;
let address;
let metricsAddress: string | undefined;
try {
  app = await createApp(config, { startStop: startStop.signal });
  address = await app.server.listen({ host: config.host, port: config.port });
  if (app.metricsPort !== undefined) metricsAddress = await app.metricsPort.listen(config.host, config.metricsPort ?? 0);
} catch (error) {
  if (error instanceof StoppedWhileStarting) {
    process.stderr.write(`entity-versions: stopped by ${error.signal} while starting; the migrations done are kept, the next start goes on from there.\n`);
    await app?.close();
    process.exit(0);
  }
  if (error instanceof ConfigError) {
    // A setting that the machine cannot bear (the open-file limit): as bad a configuration as a malformed one.
    process.stderr.write(`entity-versions: configuration error: ${error.message}\n`);
    await app?.close();
    process.exit(2);
  }
  const message = messageWithCauses(error);
  const hint = startupHint(error, { host: config.host, port: config.port, ...databaseHintSettings(config.database) });
  process.stderr.write(`entity-versions: could not start: ${message}${hint}\n`);
  await app?.close();
  process.exit(1);
}
if (app.devToken !== undefined) {
  // Development mode only (no AUTH_JWT_SECRET or AUTH_JWKS_URL): printed to
  // stderr, the terminal, never into the JSON log stream on stdout.
  process.stderr.write(
    `\nDevelopment token for user "dev" (roles publisher, admin), also in ${config.dataDir}/dev-token:\n\n` +
      `  export TOKEN=${app.devToken}\n\n` +
      `Send it as: curl -H "Authorization: Bearer $TOKEN" …\n\n`,
  );
}

// Before the line that says the service is up: whoever reads it (a
// supervisor, a test) may signal at once, and that signal must drain it.
const running = app;
let stopping = false;
const stopRunning = (signal: string, exitCode = 0) => {
  if (stopping) return;
  stopping = true;
  running.server.log.info({ signal }, "shutting down");
  running.close().then(
    () => process.exit(exitCode),
    (error: unknown) => {
      running.server.log.error({ err: error }, "shutdown failed");
      process.exit(1);
    },
  );
};
stop = stopRunning;
// Asked after the migrations, while the port opened: stopped as any running service is.
if (startStop.signal.aborted) stopRunning((startStop.signal.reason as StoppedWhileStarting).signal);
void app.fatal.then((why) => {
  running.server.log.fatal(why);
  process.stderr.write(`entity-versions: stopping: ${why}.\n`);
  stopRunning("FATAL", 1);
});

app.server.log.info(
  { address, ...(metricsAddress === undefined ? {} : { metrics: `${metricsAddress}/metrics` }), database: config.database.kind, blob: config.blob.kind, blobEndpoint: app.blobEndpoint },
  `entity-versions listening on ${address}${config.host === "0.0.0.0" || config.host === "::" ? `, and on every other interface (HOST=${config.host}),` : ""} (gRPC, gRPC-Web, Connect and REST on one port)${metricsAddress === undefined ? "" : `; metrics on ${metricsAddress}/metrics`}`,
);

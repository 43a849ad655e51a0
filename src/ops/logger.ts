import type { DestinationStream } from "pino";
import { pino } from "pino";

/**
 * Errors as log fields: name, message, code, stack and the same for the
 * cause chain, and nothing else. pino's default serializer copies every
 * enumerable property, and an Azure RestError carries its request, whose
 * Authorization header holds a SharedKey signature.
 */
export function safeError(error: unknown, depth = 0): Record<string, unknown> | undefined {
  if (error === undefined || error === null || depth > 4) return undefined;
  if (!(error instanceof Error)) return { message: String(error) };
  const e = error as Error & { code?: unknown; errno?: unknown; statusCode?: unknown };
  return {
    type: e.name,
    message: e.message.replace(/([?&]sig=)[^&\s"]+/gi, "$1[redacted]"),
    ...(e.code === undefined ? {} : { code: e.code }),
    ...(e.errno === undefined ? {} : { errno: e.errno }),
    ...(e.statusCode === undefined ? {} : { statusCode: e.statusCode }),
    stack: e.stack?.replace(/([?&]sig=)[^&\s"]+/gi, "$1[redacted]"),
    ...(e.cause === undefined ? {} : { cause: safeError(e.cause, depth + 1) }),
  };
}

/**
 * The service's pino logger: JSON lines, errors through safeError, and any
 * authorization header redacted should one ever be logged. By default it
 * writes stdout asynchronously, in batches of lines (stdoutDestination),
 * and flushes what is left when the process exits.
 */
export function createLogger(level: string, destination?: DestinationStream) {
  const options = {
    level,
    serializers: { err: safeError },
    // Exact paths only: a wildcard path makes pino walk every logged object.
    // Request logs carry no headers; these guard the shapes that could.
    redact: { paths: ["req.headers.authorization", "headers.authorization", "request.headers.authorization"], censor: "[redacted]" },
  };
  return pino(options, destination ?? stdoutDestination());
}

let stdout: ReturnType<typeof pino.destination> | undefined;

/** How long a log line may wait for others to go out with it. */
const flushEveryMs = 100;

/**
 * The one asynchronous stdout stream of the process, shared by every logger
 * made in it (the tests make several), so their lines never interleave
 * mid-line and one exit hook flushes them all.
 *
 * Lines gather until 4 KB are waiting, or for at most ~100 ms: under load a
 * write to stdout (a round trip through libuv's thread pool) per line or
 * two was ~3% of a request's CPU, and 4 KB is a write per ~16 lines. An
 * idle service pays ten empty writes a second.
 */
function stdoutDestination() {
  if (stdout !== undefined) return stdout;
  const stream = pino.destination({ dest: 1, sync: false, minLength: 4096, periodicFlush: flushEveryMs });
  process.once("exit", () => {
    try {
      stream.flushSync();
    } catch {
      // Nothing written yet, or stdout gone: nothing to save.
    }
  });
  return (stdout = stream);
}

/**
 * Writes out the lines still gathering (at most one second's wait): the
 * shutdown awaits it before exiting, since the exit hook's synchronous flush
 * cannot finish a write already under way.
 */
export function flushLogs(): Promise<void> {
  const stream = stdout;
  if (stream === undefined) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 1_000);
    try {
      stream.flush(() => {
        clearTimeout(timer);
        resolve();
      });
    } catch {
      clearTimeout(timer);
      resolve();
    }
  });
}

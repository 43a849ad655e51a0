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
 * writes stdout line by line (stdoutDestination).
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

/**
 * The one stdout stream of the process, shared by every logger made in it
 * (the tests make several), so their lines never interleave mid-line. Each
 * line is written as it is made (synchronously): no line is lost when the
 * process exits, whatever the exit, and there is nothing to flush.
 */
function stdoutDestination() {
  stdout ??= pino.destination({ dest: 1, sync: true });
  return stdout;
}

import { AsyncLocalStorage } from "node:async_hooks";
import zlib from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionGzip } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import { apiError } from "../errors/api-error.js";
import type { BodyTicket } from "../http/body-budget.js";
import { compressBrotliAnswer } from "./brotli.js";
import type { ErrorLogger } from "./error-interceptor.js";

/** The call whose request is being inflated: its share of the body budget, and the refusal it met, if any. */
export interface InflationCharge {
  readonly ticket: BodyTicket;
  /** What an inflated message must pass (a JSON one must be UTF-8): its refusal, if it fails. */
  readonly check?: (message: Uint8Array) => ConnectError | undefined;
  refusal?: ConnectError;
}

const current = new AsyncLocalStorage<InflationCharge>();

/**
 * Runs a call's handler so that what its request messages inflate to is
 * charged to its ticket. Connect decompresses inside the handler, through
 * a Compression that is told nothing of the call: the charge reaches it
 * in the handler's async context.
 */
export function chargingInflationTo<T>(charge: InflationCharge | undefined, run: () => T): T {
  return charge === undefined ? run() : current.run(charge, run);
}

/**
 * A call's answer whose every step is taken in its charging scope. A
 * streaming call's request messages after its first are read, and
 * inflated, as its answer is written (its implementation reads each as it
 * yields), from outside the handler's run: without this they would come
 * uncharged, and be refused (a reflection stream's second compressed
 * request answered INTERNAL).
 */
export function chargingAnswerTo<T>(charge: InflationCharge | undefined, body: AsyncIterable<T>): AsyncIterable<T> {
  if (charge === undefined) return body;
  return {
    [Symbol.asyncIterator]: () => {
      const it = body[Symbol.asyncIterator]();
      return {
        next: () => current.run(charge, () => it.next()),
        return: (value?: unknown) => current.run(charge, () => it.return?.(value) ?? Promise.resolve({ done: true, value: undefined as T })),
        throw: (error?: unknown) => current.run(charge, () => it.throw?.(error) ?? Promise.reject(error)),
      };
    },
  };
}

/**
 * Brotli inflations the process runs at once, at most; the others wait
 * their turn. A brotli stream names its own window, up to 16 MiB, and a
 * message that says its first block is larger makes the decoder allocate
 * that window and fill it before anything comes out to be counted: a
 * 51-byte message costs 16 MiB and about a tenth of a second of CPU,
 * whatever readMaxBytes says (gzip's window is 32 KiB). The limit bounds
 * that to 16 MiB and one thread of zlib's pool per turn, whoever sends
 * them; a client's many such messages wait for each other, not for the
 * process's memory.
 */
const brotliInflationsAtOnce = 2;
let brotliRunning = 0;
const brotliWaiting: Array<() => void> = [];

/** Resolves when a brotli inflation may start; the function it gives ends that turn (once). */
function brotliTurn(): Promise<() => void> {
  const turn = () => {
    brotliRunning++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      brotliRunning--;
      brotliWaiting.shift()?.();
    };
  };
  if (brotliRunning < brotliInflationsAtOnce) return Promise.resolve(turn());
  return new Promise((resolve) => brotliWaiting.push(() => resolve(turn())));
}

/** The loggers already told that a message came uncharged: told once each (once a process), not once a call. */
const toldOfUncharged = new WeakSet<ErrorLogger>();

/**
 * Inflates a request message, counting each piece against the call's
 * ticket as zlib produces it, so the budget holds what the message
 * inflates to, for as long as the call (its decoded message, whose
 * unknown fields are views of the inflated bytes, lives that long), and
 * nothing before it is read: a compressed call waiting for its body, or
 * one whose message is small, holds only its bytes. Past readMaxBytes it
 * is refused as connect-node refuses it; past the budget,
 * IN_FLIGHT_BYTES_EXCEEDED. One that comes with no call's charge (a
 * caller that did not run its handler in chargingInflationTo) is refused
 * INTERNAL and never inflated: nothing would bound what it holds.
 */
async function inflate(bytes: Uint8Array, readMaxBytes: number, open: () => zlib.Gunzip | zlib.BrotliDecompress, log: ErrorLogger, turn?: () => Promise<() => void>): Promise<Uint8Array<ArrayBuffer>> {
  if (bytes.length === 0) return new Uint8Array(0);
  const charge = current.getStore();
  if (charge === undefined) {
    const error = new Error("a compressed request message came to be inflated with no call's body budget to charge: refused, not inflated");
    if (!toldOfUncharged.has(log)) {
      toldOfUncharged.add(log);
      log.error({ err: error }, "compressed request message refused: it came uncharged (logged once)");
    }
    throw apiError("INTERNAL", {}, { cause: error });
  }
  const endTurn = await turn?.();
  try {
    // The call ended while it waited for its turn: nobody reads it.
    if (charge.ticket.closed) throw new ConnectError("the call ended while its request was inflated", Code.Canceled);
    return await inflateCharged(bytes, readMaxBytes, open, charge);
  } finally {
    endTurn?.();
  }
}

function inflateCharged(bytes: Uint8Array, readMaxBytes: number, open: () => zlib.Gunzip | zlib.BrotliDecompress, charge: InflationCharge): Promise<Uint8Array<ArrayBuffer>> {
  return new Promise((resolve, reject) => {
    const stream = open();
    const pieces: Buffer[] = [];
    let size = 0;
    const fail = (error: ConnectError) => {
      stream.destroy();
      reject(error);
    };
    stream.on("data", (piece: Buffer) => {
      // The call ended (its client cancelled, its deadline passed): nobody reads what is left.
      if (charge.ticket.closed) return fail(new ConnectError("the call ended while its request was inflated", Code.Canceled));
      size += piece.length;
      if (size > readMaxBytes) return fail(new ConnectError(`message is larger than configured readMaxBytes ${readMaxBytes} after decompression`, Code.ResourceExhausted));
      const refused = charge.ticket.take(piece.length);
      if (refused !== undefined) {
        const refusal = apiError("IN_FLIGHT_BYTES_EXCEEDED", refused);
        charge.refusal = refusal;
        return fail(refusal);
      }
      pieces.push(piece);
    });
    stream.on("error", (error: NodeJS.ErrnoException) => {
      // As connect-node sorts zlib's errors: a malformed stream is the client's.
      const malformed = error.code === "Z_DATA_ERROR" || error.code === "ERR_PADDING_2" || error.code?.startsWith("ERR__ERROR_FORMAT_") === true;
      reject(new ConnectError("decompression failed", malformed ? Code.InvalidArgument : Code.Internal, undefined, undefined, error));
    });
    stream.on("end", () => {
      const whole = new Uint8Array(size);
      let at = 0;
      for (const piece of pieces) {
        whole.set(piece, at);
        at += piece.length;
      }
      const refusal = charge.check?.(whole);
      if (refusal === undefined) return resolve(whole);
      charge.refusal = refusal;
      reject(refusal);
    });
    stream.end(bytes);
  });
}

/**
 * gzip as connect-node has it, and brotli with its answers at
 * brotliAnswerQuality: their requests inflated against the call's budget,
 * and refused (told to `log`, once) when no budget came with them.
 * `openBrotli` makes the brotli decoders (a test counts them).
 */
export function chargedCompressions(log: ErrorLogger, openBrotli: () => zlib.BrotliDecompress = () => zlib.createBrotliDecompress()): [gzip: Compression, brotli: Compression] {
  return [
    {
      name: compressionGzip.name,
      compress: compressionGzip.compress,
      decompress: (bytes, readMaxBytes) => inflate(bytes, readMaxBytes, () => zlib.createGunzip(), log),
    },
    {
      name: "br",
      compress: compressBrotliAnswer,
      decompress: (bytes, readMaxBytes) => inflate(bytes, readMaxBytes, openBrotli, log, brotliTurn),
    },
  ];
}

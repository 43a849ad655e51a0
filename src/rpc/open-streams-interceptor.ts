import { createContextKey, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";

/**
 * The address a call came from (its socket's remote address), where the
 * server knows it. Counted by address rather than by connection: one
 * client opening connection after connection is still one address.
 */
export const peerKey = createContextKey<string | undefined>(undefined, { description: "the call's peer address" });

/**
 * Gives up on the call's answer (resets its HTTP/2 stream, closes its
 * HTTP/1.1 connection), where the server can: what a stream whose client
 * stopped taking its messages is ended with, since the handler, blocked
 * writing, would otherwise hold it, and its place, for ever.
 */
export const dropAnswerKey = createContextKey<(() => void) | undefined>(undefined, { description: "drops the call's answer" });

/**
 * A peer as counted: an IPv4 address, or an IPv6 /64. An IPv4 client
 * reaching a dual-stack socket is seen as `::ffff:1.2.3.4`, and must count
 * as the `1.2.3.4` it is on an IPv4 socket, or it would have two shares;
 * an IPv6 host is given a whole /64 (SLAAC, privacy addresses, a cloud
 * prefix), and counted by address it would have as many shares as it
 * likes.
 */
export function peerOf(remoteAddress: string | undefined): string | undefined {
  if (remoteAddress === undefined) return undefined;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(remoteAddress);
  if (mapped !== null) return mapped[1];
  if (!remoteAddress.includes(":")) return remoteAddress;
  const groups = ipv6Groups(remoteAddress.replace(/%.*$/, ""));
  return groups === undefined ? remoteAddress : `${groups.slice(0, 4).join(":")}::/64`;
}

/** The eight groups of an IPv6 address, zeros written out; undefined when it is not one. */
function ipv6Groups(address: string): string[] | undefined {
  const halves = address.toLowerCase().split("::");
  if (halves.length > 2) return undefined;
  const part = (text: string) => (text === "" ? [] : text.split(":"));
  const [head, tail] = [part(halves[0]!), halves.length === 2 ? part(halves[1]!) : []];
  // An embedded IPv4 tail (::ffff:1.2.3.4 forms aside) takes two groups.
  const last = tail.length > 0 ? tail : head;
  if (last.length > 0 && last[last.length - 1]!.includes(".")) last.splice(last.length - 1, 1, "0", "0");
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 0) return undefined;
  const groups = [...head, ...Array.from({ length: halves.length === 2 ? missing : 0 }, () => "0"), ...tail];
  return groups.every((g) => /^[0-9a-f]{1,4}$/.test(g)) ? groups.map((g) => parseInt(g, 16).toString(16)) : undefined;
}

/** Limits of the streams that need no token. */
export interface OpenStreamsLimits {
  /** Streams open at once in the process (HTTP_MAX_OPEN_STREAMS). */
  readonly max: number;
  /**
   * How long a message of a stream may wait for its client to take it
   * (RESPONSE_BODY_TIMEOUT_MS) before the stream is dropped.
   */
  readonly untakenMs: number;
}

/**
 * Caps the streams open at once through the services that need no token
 * (health Watch, reflection): anyone who reaches the port may open them,
 * each lives until its client ends it, and each holds tens of kilobytes,
 * so without a cap one client opening streams on connection after
 * connection would fill the heap. A stream past the cap is refused at
 * once (RESOURCE_EXHAUSTED `TOO_MANY_STREAMS`); its place is freed when
 * its answer ends, however it ends. One peer address may hold a quarter of
 * the places (at least one), however many connections it opens, so that
 * a single client cannot take them all from everyone else's health checks
 * (gRPC client-side health checking watches; a refused Watch takes the
 * replica out of that client's rotation). A stream whose client has not
 * taken a message within `untakenMs` of its being ready (an HTTP/2 window
 * left at 0) is dropped and its place freed: its handler, waiting for the
 * write to drain, would never ask for its next request, so the request
 * body's timeout would never end it. Unary calls (Health/Check) are not
 * counted: each ends with its answer, a moment's work, and the call gate
 * does not bound them (it counts only authenticated calls); what bounds
 * them is a connection's concurrent streams and, for streams reset before
 * their answer, the one-port server's reset budget (ResetBudget).
 */
export function openStreamsInterceptor(limits: OpenStreamsLimits): Interceptor {
  const { max, untakenMs } = limits;
  const perPeer = Math.max(1, Math.floor(max / 4));
  // Deleted at zero: addresses come and go, and a map of every address
  // ever seen would grow without bound.
  const byPeer = new Map<string, number>();
  let open = 0;
  return (next) => async (req) => {
    if (!req.stream) return next(req);
    const peer = peerOf(req.contextValues.get(peerKey));
    const mine = peer === undefined ? 0 : (byPeer.get(peer) ?? 0);
    if (mine >= perPeer) throw apiError("TOO_MANY_STREAMS", { limit: perPeer, scope: "peer" });
    if (open >= max) throw apiError("TOO_MANY_STREAMS", { limit: max, scope: "server" });
    open++;
    if (peer !== undefined) byPeer.set(peer, mine + 1);
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      open--;
      if (peer === undefined) return;
      const left = (byPeer.get(peer) ?? 1) - 1;
      if (left > 0) byPeer.set(peer, left);
      else byPeer.delete(peer);
    };
    // An answer that is never iterated (its call ended before the first
    // message was asked for) never runs its generator's finally; the call's
    // signal ending frees the place then.
    req.signal.addEventListener("abort", release, { once: true });
    const drop = req.contextValues.get(dropAnswerKey);
    // With no way to drop the answer (an in-process call), freeing the
    // place would let the stream go on uncounted: it is left to run.
    const untaken =
      drop === undefined
        ? undefined
        : () => {
            release();
            drop();
          };
    try {
      const res = (await next(req)) as StreamResponse;
      return { ...res, message: released(res.message, release, untaken, untakenMs) };
    } catch (error) {
      release();
      throw error;
    }
  };
}

/**
 * The messages, with `release` called once they end however they end, and
 * `untaken` once one has waited `untakenMs` for its consumer to ask for
 * the next: Connect asks only once the previous message's write has
 * drained, so a wait that long is a client that stopped reading.
 */
async function* released<T>(messages: AsyncIterable<T>, release: () => void, untaken: (() => void) | undefined, untakenMs: number): AsyncGenerator<T> {
  try {
    for await (const message of messages) {
      const timer = untaken === undefined ? undefined : setTimeout(untaken, untakenMs);
      try {
        yield message;
      } finally {
        clearTimeout(timer);
      }
    }
  } finally {
    release();
  }
}

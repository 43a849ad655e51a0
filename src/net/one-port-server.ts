import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type stream from "node:stream";

/** The request handler Fastify hands to its server factory. */
export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/** Limits and timeouts of the one-port server; Fastify's own options do not reach the inner servers. */
export interface OnePortOptions {
  /** Streams one HTTP/2 connection may have open at once, advertised in SETTINGS; more are refused. */
  readonly maxConcurrentStreams?: number;
  /** An HTTP/2 session, or an HTTP/1.1 keep-alive connection between requests, with no traffic this long is closed. */
  readonly idleTimeoutMs?: number;
  readonly headersTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  /** How long a new connection may stay silent before it is dropped. */
  readonly firstBytesTimeoutMs?: number;
  /**
   * Connections held at once; more are closed as they arrive. Below the
   * process's open-file limit, so that idle client connections can never
   * leave it without sockets for the database and the blob store.
   */
  readonly maxConnections?: number;
  /**
   * The answer to a request refused before the handler sees it (over
   * HTTP/1.1 one Node's parser cannot read, or without Host; one whose
   * Host or HTTP/2 `:authority` is not a host and port), or as its chunked
   * body comes. Without it, Node answers the HTTP/1.1 ones itself, with a
   * bare status and no body, and lets the others through.
   */
  readonly unreadable?: (request: UnreadableRequest) => RefusalAnswer;
  /** How fast an HTTP/2 client may reset streams before their answer; past it, its session is closed (GOAWAY ENHANCE_YOUR_CALM). */
  readonly resets?: ResetBudget;
  /** Told once of each session closed for resetting streams too fast, with its peer's address. */
  readonly onResetFlood?: (peer: { readonly address: string | undefined; readonly port: number | undefined }) => void;
}

/** A request refused before it reached the handler, or as its body came. */
export type UnreadableRequest =
  /** Its request line and headers together are past Node's limit (`http.maxHeaderSize`). */
  | { readonly kind: "too-large"; readonly limitBytes: number }
  /**
   * What is wrong with it: Node's parser refused it (a header line without
   * a colon, two Content-Lengths, a chunked body's framing), or it has no
   * Host, or one (or an HTTP/2 `:authority`) that is not a host and port.
   * `request` is the request when it was given to the handler already (its
   * chunked body could not be read): the handler's answer to it is never
   * sent.
   */
  | { readonly kind: "malformed"; readonly problem: string; readonly request?: http.IncomingMessage };

/** An answer the server writes itself: its status, headers, and a JSON body. */
export interface RefusalAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: unknown;
}

/** The outer server, with the connection controls Fastify calls on close. */
export interface OnePortServer extends net.Server {
  closeIdleConnections(): void;
  closeAllConnections(): void;
  /**
   * Moves clients off before a close, still serving: new connections are
   * accepted, each HTTP/1.1 connection's last answer closes it
   * (`Connection: close`) when not yet begun, and a request pipelined
   * behind such an answer is not run, HTTP/1.1 connections unused for a second are
   * closed (and those going quiet later in the drain), and HTTP/2
   * sessions get GOAWAY (those opened from now on after their first stream),
   * their open streams let finish. Without it, a keep-alive client, or a
   * load balancer's pool of connections, keeps using this server until the
   * close cuts it, and calls sent as it closes fail.
   */
  drain(): void;
}

const preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** A refusal as written on the wire: its JSON body, and headers that close the connection after it (the request's framing is not to be trusted). */
function refusal(answer: RefusalAnswer): { status: number; headers: Record<string, string>; body: string } {
  const body = JSON.stringify(answer.body);
  return {
    status: answer.status,
    headers: { ...answer.headers, "content-type": "application/json; charset=utf-8", "content-length": String(Buffer.byteLength(body)), connection: "close" },
    body,
  };
}

/**
 * Whether a Host header (or HTTP/2 `:authority`) is a host and optional
 * port (RFC 3986, 3.2.2), as a URL reads one: Connect builds each request's
 * URL on it (`new URL(path, "http://" + host)`), and answers an error
 * INTERNAL when that throws (empty, a space, a port past 65535, a bare
 * IPv6 address). The last that passed is kept: the next request's,
 * nearly always the same, costs a comparison.
 */
let knownAuthority: string | undefined;
function isAuthority(value: string): boolean {
  if (value === knownAuthority) return true;
  // The URL parser would end the host at these (or drop white space) and read the rest as a path, a query or userinfo.
  if (/[\s/?#@\\]/.test(value) || !URL.canParse(`http://${value}`)) return false;
  knownAuthority = value;
  return true;
}

/** The address and port a connection was made to, as a Host header writes them (an IPv6 address in brackets). */
function localAuthority(socket: net.Socket): string {
  const address = socket.localAddress ?? "localhost";
  return `${address.includes(":") ? `[${address}]` : address}:${socket.localPort ?? 80}`;
}

/** The problem with a Host header or `:authority` that is not one. */
function notAuthority(name: string, value: string): string {
  const shown = JSON.stringify(value.length > 100 ? `${value.slice(0, 100)}…` : value);
  return `its ${name} ${shown} is not a host name or address with an optional port (RFC 9110, 7.2): send the server's name, or its address (an IPv6 one in brackets), and its port`;
}

/** How long a connection whose request could not be read is read on (and dropped) after its answer, before it is cut. */
const refusedLingerMs = 2_000;

/**
 * While draining, how long an HTTP/1.1 connection must have gone unused
 * before it is closed. Closing a keep-alive connection races a request
 * its client may be sending on it at that moment (which then fails); one
 * in use is instead closed by its next answer, and one this quiet is
 * unlikely to be sent on just then.
 */
const drainIdleMs = 1_000;

/**
 * Streams an HTTP/2 client may reset before their answer, per session, as a
 * token bucket: `resetBurst` at once (when absent, the session's advertised
 * concurrent streams: a client whose every open call is cancelled at once,
 * as when its deadline passes while the server is slow, stays), refilled
 * at `resetsPerSecond`. A reset stream costs its client nothing, yet the
 * work its request began (a health Check, an unauthenticated call refused
 * and its place given back) goes on: without a bound below nghttp2's own
 * (about 1,000 a session), a few dozen connections of HEADERS+RST_STREAM
 * pairs stall everyone else (the "rapid reset" attack, CVE-2023-44487):
 * what the attack buys is a burst past the concurrent streams, which the
 * bucket's size takes away. Only resets within quickResetMs of their
 * stream's headers count, and the refill is generous (100 a second): a
 * busy channel whose calls' deadlines pass while the server is slow, or
 * that hedges its calls, cancels many, and closing it would add to the
 * load.
 */
export interface ResetBudget {
  readonly resetBurst?: number;
  readonly resetsPerSecond?: number;
}

/** See ResetBudget. */
const defaultResetsPerSecond = 100;
/**
 * A reset this soon after its stream's headers is charged to the budget
 * (ResetBudget): work a stream began that its client drops within it
 * piles up no faster than the work of the streams it may keep open.
 */
const quickResetMs = 100;

/** The most header bytes an HTTP/2 request may carry (SETTINGS_MAX_HEADER_LIST_SIZE; HTTP/1.1's is Node's 16 KiB). */
export const maxHeaderListBytes = 64 * 1024;

/**
 * One TCP port for plaintext HTTP/2 (h2c: what gRPC clients without TLS
 * speak) and HTTP/1.1 (curl, browsers, most REST clients). The outer server
 * reads a connection's first bytes, puts them back, and hands the socket to
 * an inner HTTP/2 server when they are the HTTP/2 connection preface, else to
 * an inner HTTP/1.1 server; both call the same handler.
 *
 * HTTP/2 sessions advertise `maxConcurrentStreams` (Node's default is
 * 2^32-1) and `maxHeaderListBytes`, and are closed with GOAWAY after `idleTimeoutMs` without traffic
 * (Node sets no idle timeout on HTTP/2 sessions by default).
 *
 * Closing it stops accepting, lets requests in flight finish, closes the
 * HTTP/1.1 connections with none (idle keep-alive ones, and those whose
 * request head is still unfinished) and each busy one once its last answer
 * is sent (`Connection: close` when its head is still to be written), and
 * sends GOAWAY to HTTP/2 sessions once their streams end.
 */
export function createOnePortServer(handler: RequestHandler, options: OnePortOptions = {}): OnePortServer {
  const idleTimeoutMs = options.idleTimeoutMs ?? 65_000;
  const headersTimeoutMs = options.headersTimeoutMs ?? 20_000;
  const { unreadable } = options;
  const h1 = http.createServer(
    {
      keepAliveTimeout: idleTimeoutMs,
      headersTimeout: headersTimeoutMs,
      requestTimeout: options.requestTimeoutMs ?? 120_000,
      // Node would answer a request without Host with a bare 400 itself.
      requireHostHeader: unreadable === undefined,
    },
    (req, res) => {
      // A request that can never be answered is not run, so that its
      // client, which sees its connection close without an answer, may
      // safely send it again: one that arrives on a connection closing has
      // ended (sent on a keep-alive connection as its last answer
      // finished), and one pipelined behind an answer that closes its
      // connection (draining, closing, or its client's Connection: close),
      // after which Node sends nothing more.
      if (req.socket.writableEnded || behindClosingAnswer(req.socket, res)) return;
      // An answer that closes its connection says so with shouldKeepAlive
      // (Node then writes Connection: close), not the header alone: a
      // request pipelined behind it is then not run (behindClosingAnswer).
      if (unreadable !== undefined && req.httpVersion === "1.1" && req.headers.host === undefined) {
        const { status, headers, body } = refusal(unreadable({ kind: "malformed", problem: "it has no Host header, which every HTTP/1.1 request carries (RFC 9112, 3.2)" }));
        res.shouldKeepAlive = false;
        res.writeHead(status, headers).end(body);
        return;
      }
      // One that names no host (HTTP/1.0 without Host, or an empty Host,
      // which RFC 9112 (3.2) allows) is taken to name the address it was
      // sent to, on every route alike: Connect, which builds its URL on
      // the Host, could otherwise only answer INTERNAL.
      if (req.headers.host === undefined || req.headers.host === "") req.headers.host = localAuthority(req.socket);
      if (unreadable !== undefined && !isAuthority(req.headers.host)) {
        const { status, headers, body } = refusal(unreadable({ kind: "malformed", problem: notAuthority("Host header", req.headers.host) }));
        res.shouldKeepAlive = false;
        res.writeHead(status, headers).end(body);
        return;
      }
      handler(req, res);
    },
  );
  // An expectation other than 100-continue (none a client of this API
  // sends) is ignored and its request served, which RFC 9110 (10.1.1)
  // allows as it allows a 417: Node's own 417 has no body, so says
  // nothing of what to change.
  h1.on("checkExpectation", (req: http.IncomingMessage, res: http.ServerResponse) => h1.emit("request", req, res));
  // Answers not yet closed, by HTTP/1.1 connection, in the order of their requests.
  const unfinished = new WeakMap<net.Socket, Set<http.ServerResponse>>();
  // The answer to each HTTP/1.1 connection's latest request, closed or not.
  const latestAnswer = new WeakMap<net.Socket, http.ServerResponse>();
  /**
   * Whether an answer ahead of `res` on its connection closes the
   * connection. Told by shouldKeepAlive, which whatever closes a connection
   * after its answer sets (a Connection: close header alone is not seen).
   */
  const behindClosingAnswer = (socket: net.Socket, res: http.ServerResponse): boolean => {
    const open = unfinished.get(socket);
    if (open === undefined || open.size < 2) return false;
    for (const other of open) if (other !== res && !other.shouldKeepAlive) return true;
    return false;
  };
  /**
   * Has an HTTP/1.1 connection close after its last answer
   * (`Connection: close`), when that answer's head is still to be written.
   * Only after its last: a request pipelined behind an answer that closes
   * the connection has been run already, and its own answer would never be
   * sent. One whose last head has gone out keep-alive is closed otherwise
   * (the drain's sweep, release, or endRefused).
   */
  const closeAfterLastAnswer = (socket: net.Socket): void => {
    let last: http.ServerResponse | undefined;
    for (const res of unfinished.get(socket) ?? []) last = res;
    if (last !== undefined && !last.headersSent) last.shouldKeepAlive = false;
  };
  // Connections on which a request could not be read: none after it is.
  const refused = new WeakSet<stream.Duplex>();
  /**
   * Ends a refused connection, after `data` (its refusal) if given. Ended,
   * not destroyed at once: what the client is still sending is read (and
   * dropped) for a while, so that what it was sent is not lost to a reset;
   * past that, nobody holds the connection by sending on.
   */
  const endRefused = (socket: stream.Duplex, data?: string): void => {
    socket.end(data);
    const linger = setTimeout(() => socket.destroy(), refusedLingerMs);
    linger.unref();
    socket.once("close", () => clearTimeout(linger));
  };
  if (unreadable !== undefined) {
    // Fastify answers "clientError" on the server it is given, the outer
    // one, which never emits it: answered here, in the API's error shape.
    // As Node's own answer is, only on a connection still open on which no
    // answer has begun (the error can come mid-body), and once: the parser
    // reports each later chunk again. A request timeout or a reset has
    // nobody to answer, nor has a client that hung up (FIN) partway
    // through a request (HPE_INVALID_EOF_STATE): it gave the request up,
    // as one that resets does, and the request is canceled, not malformed.
    h1.on("clientError", (error: NodeJS.ErrnoException, socket: stream.Duplex) => {
      if (refused.has(socket)) return;
      const open = [...(unfinished.get(socket as net.Socket) ?? [])];
      // The answer to the request whose body the error is in, if it is in
      // one: the latest request given to the handler, while incomplete. Its
      // answer may have been sent already (one given before the body was
      // read, keep-alive), or have begun: no second answer follows it. Nor
      // is one written ahead of the answers to requests before it.
      const latest = latestAnswer.get(socket as net.Socket);
      const reading = latest !== undefined && !latest.req.complete ? latest : undefined;
      const at = reading === undefined ? -1 : open.indexOf(reading);
      if (reading !== undefined && reading.writableEnded && at > 0 && error.code !== "ECONNRESET" && socket.writable) {
        // Answered whole before its body was read (a call refused from its
        // headers), that answer queued behind those to complete requests
        // still being answered, which may have taken effect: they are sent,
        // and its own, and the connection then closes (on the last answer's
        // close), rather than cut with them all lost.
        refused.add(socket);
        return;
      }
      if (error.code === "ECONNRESET" || error.code === "HPE_INVALID_EOF_STATE" || error.code === "ERR_HTTP_REQUEST_TIMEOUT" || !socket.writable || (reading !== undefined && (reading.headersSent || !open.includes(reading)))) {
        return void socket.destroy();
      }
      refused.add(socket);
      if (at > 0) {
        // Its body broke behind complete requests still being answered: as
        // for a bad request behind them, it is not answered, theirs are,
        // and the connection closes after the last of them (which Node
        // then gives this request's answer, never to be written).
        const ahead = open[at - 1]!;
        if (!ahead.headersSent) ahead.shouldKeepAlive = false;
        else ahead.once("finish", () => endRefused(socket));
        return;
      }
      if (reading === undefined && open.length > 0) {
        // A bad request pipelined behind complete ones still being
        // answered: it is not answered, as the client would take its
        // refusal for theirs, which may have taken effect. Their answers
        // are sent, the last with Connection: close, and the connection
        // then ended (endRefused, when the last went out keep-alive).
        closeAfterLastAnswer(socket as net.Socket);
        return;
      }
      const why = error.message.replace(/^Parse Error: /, "");
      const { status, headers, body } = refusal(
        unreadable(
          // In a chunked body, the error is in its framing (a chunk size, a
          // chunk's end, trailer fields past the header limit); a body with
          // a Content-Length has no framing to break, and is said to be
          // unreadable only.
          reading !== undefined
            ? {
                kind: "malformed",
                problem: /\bchunked\s*$/i.test(reading.req.headers["transfer-encoding"] ?? "")
                  ? `its body's chunked framing is not valid as RFC 9112 (7.1) writes it (${error.code === "HPE_HEADER_OVERFLOW" ? `trailer fields past ${http.maxHeaderSize} bytes` : why})`
                  : `its body could not be read as RFC 9112 (6) writes it (${why})`,
                request: reading.req,
              }
            : error.code === "HPE_HEADER_OVERFLOW"
              ? { kind: "too-large", limitBytes: http.maxHeaderSize }
              : { kind: "malformed", problem: `its request line or headers are not HTTP/1.1 as RFC 9112 writes it (${why})` },
        ),
      );
      endRefused(socket, `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")}\r\n${body}`);
    });
  }
  // An HTTP/1.1 connection on which nothing moved for an idle period is
  // closed (Node tells of it here, and destroys it only when nobody
  // listens): one with no answer in progress (keep-alive), and one whose
  // answer sits in its send buffer (a client that sends requests,
  // pipelined or not, and never reads), which would otherwise hold the
  // connection and the answer's memory for as long as its client likes. A
  // call still working on its answer is left running: its deadline ends it.
  h1.setTimeout(idleTimeoutMs, (socket) => {
    if (socket.writableLength > 0 || (unfinished.get(socket)?.size ?? 0) === 0) socket.destroy();
  });
  const h2 = http2.createServer(
    // The header list size a session takes is advertised (Node advertises
    // none, 2^32-1, yet nghttp2 refuses a block of 64 KiB), so that clients
    // learn the limit before they pass it.
    { settings: { maxConcurrentStreams: options.maxConcurrentStreams ?? 100, maxHeaderListSize: maxHeaderListBytes } },
    (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
      // Of a session closed for its resets: its streams, already read, are not begun.
      if (unserved.has(req.stream)) return void req.stream.destroy();
      // `:authority`, or Host in its place.
      const authority = req.authority as string | undefined;
      if (unreadable !== undefined && authority !== undefined && !isAuthority(authority)) {
        // HTTP/2 has no Connection header (Node refuses one): the stream ends with the answer.
        const { status, headers, body } = refusal(unreadable({ kind: "malformed", problem: notAuthority(":authority", authority) }));
        const { connection: _, ...streamHeaders } = headers;
        res.writeHead(status, streamHeaders).end(body);
        return;
      }
      handler(req, res);
    },
  );
  // Streams told of after their session was closed for its resets (ResetBudget).
  const unserved = new WeakSet<http2.ServerHttp2Stream>();
  // As over HTTP/1.1 (see h1's checkExpectation).
  h2.on("checkExpectation", (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => h2.emit("request", req, res));
  // Node applies the server's timeout to each session. An idle one is
  // closed (GOAWAY). One with a stream open is not idle, only quiet (a
  // health Watch sends nothing while the status holds): it is pinged
  // instead, which proves the peer is there and is traffic to proxies, and
  // is destroyed when the ping fails or is still unanswered a period later.
  h2.setTimeout(idleTimeoutMs);
  const openStreams = new WeakMap<http2.ServerHttp2Session, number>();
  const pinging = new WeakSet<http2.ServerHttp2Session>();
  const onQuiet = (session: http2.ServerHttp2Session): void => {
    if ((openStreams.get(session) ?? 0) === 0) {
      session.close();
      // A graceful close waits for the session's streams, and one whose
      // headers never finished (no "stream" event, so not counted above)
      // never ends: given one more quiet period, then cut. A stream that
      // began after all (its headers were on their way) is let finish, the
      // session looked at again each idle period.
      const cut = (): void => {
        if ((openStreams.get(session) ?? 0) === 0) return void session.destroy();
        timer = setTimeout(cut, idleTimeoutMs);
        timer.unref();
      };
      let timer = setTimeout(cut, idleTimeoutMs);
      timer.unref();
      session.once("close", () => clearTimeout(timer));
      return;
    }
    // The last quiet period's ping still unanswered: the peer is gone.
    if (pinging.has(session)) return void session.destroy();
    pinging.add(session);
    session.ping((error) => {
      pinging.delete(session);
      if (error !== null) session.destroy();
    });
    // Node's listener of a session's timeout fires once: this one watches the next quiet period.
    session.setTimeout(idleTimeoutMs, () => onQuiet(session));
  };
  h2.on("timeout", onQuiet);
  const sessions = new Set<http2.ServerHttp2Session>();
  const h1Sockets = new Set<net.Socket>();
  // When each HTTP/1.1 connection last began a request or ended an answer.
  const lastUsed = new WeakMap<net.Socket, number>();
  // How many bytes each had read when its last answer ended (none: 0).
  const readByLastAnswer = new WeakMap<net.Socket, number>();
  let drainSweep: NodeJS.Timeout | undefined;
  let closing = false;
  let draining = false;
  // Once closing, an HTTP/1.1 connection with no request given to the
  // handler is ended, after what was written to it has gone out: Node's own
  // closeIdleConnections leaves one whose request head is unfinished (a
  // slow or stalled client), and one whose answer had begun, keep-alive,
  // before the close, which would each hold the close until cut.
  const release = (socket: net.Socket): void => {
    if (socket.destroyed || socket.writableEnded || (unfinished.get(socket)?.size ?? 0) > 0) return;
    socket.end();
    if (socket.writableFinished) socket.destroy();
    else socket.once("finish", () => socket.destroy());
  };

  // Node tracks an HTTP/1 server's connections (closeAllConnections needs
  // that) only once the server has emitted "listening".
  h1.emit("listening");
  // An answer queued behind another on a connection (pipelining) never
  // closes when the connection dies first (Node emits "close" only for the
  // one being written): closed here, so that what waits for it (a call's
  // place, its log line) is let go.
  h1.prependListener("request", (req, res) => {
    if (closing || draining) res.shouldKeepAlive = false;
    const socket = req.socket;
    lastUsed.set(socket, Date.now());
    latestAnswer.set(socket, res);
    let open = unfinished.get(socket);
    if (open === undefined) {
      const mine = (open = new Set());
      unfinished.set(socket, mine);
      socket.once("close", () => {
        // Only those never given the connection: Node closes the one that
        // was. Destroyed first, so that whoever asks later (a call that
        // was waiting for its token's check) finds it closed.
        for (const left of [...mine]) {
          if (left.socket !== null) continue;
          left.destroy();
          left.emit("close");
        }
      });
    }
    open.add(res);
    res.once("close", () => {
      lastUsed.set(socket, Date.now());
      readByLastAnswer.set(socket, socket.bytesRead);
      open.delete(res);
      if (closing) release(socket);
      else if (open.size === 0 && refused.has(socket) && !socket.writableEnded) endRefused(socket);
    });
  });
  const resetBurst = options.resets?.resetBurst ?? options.maxConcurrentStreams ?? 100;
  const resetsPerSecond = options.resets?.resetsPerSecond ?? defaultResetsPerSecond;
  h2.on("session", (session) => {
    sessions.add(session);
    openStreams.set(session, 0);
    // The session's reset budget (ResetBudget), refilled as it is spent.
    let resetTokens = resetBurst;
    let resetRefilledAt = Date.now();
    let calmed = false;
    const chargeReset = (): void => {
      if (calmed || session.closed || session.destroyed) return;
      const now = Date.now();
      resetTokens = Math.min(resetBurst, resetTokens + ((now - resetRefilledAt) / 1000) * resetsPerSecond);
      resetRefilledAt = now;
      if (resetTokens >= 1) return void (resetTokens -= 1);
      // Told before the session closes, while its socket still has its peer's address.
      options.onResetFlood?.({ address: session.socket?.remoteAddress, port: session.socket?.remotePort });
      // A GOAWAY that says why (destroy's own, NO_ERROR, follows it: a
      // code given to destroy is not what Node sends); its streams are cut,
      // so that the work they began ends, and those read with them but not
      // yet handed on are not begun (unserved).
      calmed = true;
      session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      session.destroy();
    };
    // Ahead of the server's own listener, which hands the stream to the
    // handler: a stream the session's budget does not cover is not begun.
    session.prependListener("stream", (stream) => {
      openStreams.set(session, (openStreams.get(session) ?? 0) + 1);
      stream.once("close", () => openStreams.set(session, (openStreams.get(session) ?? 1) - 1));
      // Aborted: closed with a reset while its answer was not yet all
      // written. Charged only within quickResetMs of its headers, the
      // attack's pattern: a call its client cancels at its deadline (a slow
      // server, many calls in flight: hundreds a second) or one this
      // server drops later is not. A stream is told of after the frames
      // read with it, so one reset in the same read as its headers is
      // aborted already.
      if (stream.aborted) chargeReset();
      else {
        const opened = performance.now();
        stream.once("aborted", () => {
          if (performance.now() - opened < quickResetMs) chargeReset();
        });
      }
      // The session is destroyed, but streams read before that are still told of.
      if (calmed) unserved.add(stream);
    });
    session.once("close", () => sessions.delete(session));
    if (closing) session.close();
    // Served once, as an HTTP/1.1 connection is while draining. (A
    // client's stream sent as the GOAWAY is on its way is refused, as
    // REFUSED_STREAM: not run, and retried by gRPC clients; nghttp2 as
    // Node exposes it has no GOAWAY that still takes them.)
    else if (draining) session.once("stream", () => session.close());
  });

  const firstBytesTimeoutMs = options.firstBytesTimeoutMs ?? 30_000;
  // Connections that have sent nothing yet belong to neither server: kept
  // here so that closing the server closes them too, rather than waiting
  // for their first-bytes timeout (a TCP health check, a client's spare
  // connection).
  const silent = new Set<net.Socket>();
  const outer = net.createServer((socket) => {
    let seen: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), firstBytesTimeoutMs);
    silent.add(socket);
    const done = () => {
      silent.delete(socket);
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("close", done);
    };
    const onError = () => {
      done();
      socket.destroy();
    };
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      // A strict prefix of the preface may still become HTTP/2: wait.
      if (seen.length < preface.length && preface.subarray(0, seen.length).equals(seen)) return;
      done();
      socket.pause();
      socket.unshift(seen);
      const isHttp2 = seen.length >= preface.length && seen.subarray(0, preface.length).equals(preface);
      // An HTTP/2 session drains the socket's buffer when it sets up, so the
      // socket must stay paused until then; the HTTP/1 server only reads a
      // flowing socket.
      if (isHttp2) h2.emit("connection", socket);
      else {
        h1Sockets.add(socket);
        lastUsed.set(socket, Date.now());
        socket.once("close", () => h1Sockets.delete(socket));
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
    socket.on("error", onError);
    socket.on("close", done);
  }) as OnePortServer;
  if (options.maxConnections !== undefined) outer.maxConnections = options.maxConnections;

  outer.closeIdleConnections = () => {
    for (const socket of silent) socket.destroy();
    for (const socket of h1Sockets) release(socket);
    for (const session of sessions) session.close();
  };
  outer.closeAllConnections = () => {
    for (const socket of silent) socket.destroy();
    h1.closeAllConnections();
    for (const session of sessions) session.destroy();
  };
  outer.drain = () => {
    if (draining || closing) return;
    draining = true;
    for (const socket of h1Sockets) closeAfterLastAnswer(socket);
    // A connection in use is closed by its next answer (`Connection:
    // close`); one gone quiet, by this sweep. Not ended as its answer ends,
    // as closing does: that could cut a request its client has already sent on it.
    // One that has read bytes since its last answer is not quiet whatever
    // its pace: a request is on its way (its head, sent slowly), which
    // closing would cut. Node's headersTimeout bounds how long a head may
    // take; past that long, bytes that began no request (a stray line
    // break after a body) keep it no longer.
    const sweep = (): void => {
      const now = Date.now();
      for (const socket of h1Sockets) {
        const used = lastUsed.get(socket) ?? 0;
        if (used > now - drainIdleMs) continue;
        if (used > now - headersTimeoutMs && socket.bytesRead !== (readByLastAnswer.get(socket) ?? 0)) continue;
        release(socket);
      }
    };
    sweep();
    drainSweep = setInterval(sweep, drainIdleMs / 4);
    drainSweep.unref();
    for (const session of sessions) session.close();
  };
  const close = outer.close.bind(outer);
  outer.close = (callback?: (err?: Error) => void) => {
    closing = true;
    clearInterval(drainSweep);
    for (const socket of h1Sockets) closeAfterLastAnswer(socket);
    close(callback);
    outer.closeIdleConnections();
    return outer;
  };
  return outer;
}

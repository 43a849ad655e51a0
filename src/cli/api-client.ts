import { setTimeout as sleep } from "node:timers/promises";
import { entityIdPattern } from "../domain/identifiers.js";
import { CliError, ServiceError } from "./cli-error.js";
import type { PageOptions } from "./command-context.js";
import type { Settings } from "./settings.js";

/** How long one call may take before it counts as a network failure. */
const defaultCallTimeoutMs = 60_000;
/** Longest wait between attempts, whatever Retry-After asks. */
const maxBackoffMs = 5_000;

/** How a call may be retried. */
export interface CallOptions {
  /**
   * Attempts in all (1: never retried). Retried are network failures after
   * the request may have left (a gateway's 502 or 504 among them), and 503s
   * (the service's "nothing was changed, retry"); calls that are not safe to
   * repeat pass 1.
   */
  attempts?: number;
  /**
   * Also retry when the connection is refused: for the calls that finish a
   * push (confirm), where a service restarting for a few seconds should not
   * lose an upload already made. Elsewhere a refused connection fails at
   * once, so a wrong URL is reported without delay.
   */
  retryRefused?: boolean;
}

/** A successful answer: the HTTP status (ConfirmUpload tells 201 from 200) and the JSON body. */
export interface ApiAnswer<T> {
  readonly status: number;
  readonly body: T;
  /** How many attempts it took: more than one means an earlier answer may have been lost. */
  readonly attempts: number;
}

/** Failures before any request left: retrying cannot make the request land twice, nor, mostly, succeed. */
const refusedCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "bad port"]);

/** The code of a fetch failure's cause (ECONNREFUSED, UND_ERR_SOCKET, …), else the innermost cause's message. */
function networkCause(error: unknown): string {
  let e: unknown = error;
  let message = error instanceof Error ? error.message : String(error);
  for (let depth = 0; depth < 4 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    if (e.name === "TimeoutError" || e.name === "AbortError") return e.name;
    message = e.message;
    e = e.cause;
  }
  return message;
}

/** A stream that broke once it had begun (the connection cut): what was received stands, and the rest may be asked for again. */
export class StreamBroken extends CliError {
  constructor(cause: string, error: unknown) {
    super(`the stream was cut (${cause})`, "STREAM_BROKEN");
    this.name = "StreamBroken";
    this.cause = error;
  }
}

/** The query of a paginated listing (AIP-158): `?page_size=…&page_token=…`, or "" for the first page at the service's size. */
export function pageQuery(options: PageOptions): string {
  const query = new URLSearchParams();
  if (options.limit !== undefined) query.set("page_size", String(options.limit));
  if (options.pageToken !== undefined) query.set("page_token", options.pageToken);
  return query.size === 0 ? "" : `?${query.toString()}`;
}

/** Encodes path segments of a REST route (ids are plain, but never trusted to be). */
export function apiPath(...segments: string[]): string {
  return `/api/${segments.map(encodeURIComponent).join("/")}`;
}

/**
 * The REST JSON API over fetch, as any CLI would call it: bearer token,
 * JSON bodies, errors turned into {@link ServiceError} with the service's
 * code, message and body, and a service that cannot be reached into one
 * clear message naming the URL and how to change it.
 */
export class ApiClient {
  constructor(
    readonly settings: Settings,
    private readonly token: string,
    /** Where notes about retries go (stderr); never stdout, which --json keeps for the answer. */
    private readonly note: (line: string) => void = () => {},
    /** How long one call may take (tests shorten it: a service that never answers would hold them for minutes). */
    private readonly callTimeoutMs = defaultCallTimeoutMs,
  ) {}

  /** Calls one REST route; resolves with a 2xx answer, rejects with a CliError otherwise. */
  async call<T>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<ApiAnswer<T>> {
    const attempts = options.attempts ?? 3;
    const url = `${this.settings.url}${path}`;
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= attempts;
      let res: Response;
      let text: string;
      try {
        res = await fetch(url, {
          method,
          headers: {
            authorization: `Bearer ${this.token}`,
            accept: "application/json",
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: AbortSignal.timeout(this.callTimeoutMs),
        });
        // A connection cut while the answer arrives is a network failure
        // too: for a confirm, the very case its retry is for.
        text = await res.text();
      } catch (error) {
        const cause = networkCause(error);
        const refused = refusedCodes.has(cause) || tlsFailure(cause);
        if (last || (refused && options.retryRefused !== true)) {
          throw cause === "TimeoutError" ? this.#silent(this.callTimeoutMs, attempt, error) : this.#unreachable(cause, error);
        }
        const wait = backoff(attempt);
        this.note(`${method} ${path}: ${cause}; retrying in ${wait} ms (attempt ${attempt + 1} of ${attempts})`);
        await sleep(wait);
        continue;
      }
      const parsed = parseJson(text);
      if (res.ok) {
        if (parsed === undefined || !fromTheService(res)) throw this.#unexpected(res.status, text);
        return { status: res.status, body: parsed as T, attempts: attempt };
      }
      if (gatewayFailure(res)) {
        // A proxy's 502 or 504 is a network failure between it and the
        // service: the request may have reached the service, so it is
        // retried as one (calls not safe to repeat pass attempts 1).
        if (last) throw this.#gateway(res.status, attempt);
        const wait = backoff(attempt);
        this.note(`${method} ${path}: HTTP ${res.status} from a gateway; retrying in ${wait} ms (attempt ${attempt + 1} of ${attempts})`);
        await sleep(wait);
        continue;
      }
      if (res.status === 503 && !last) {
        const wait = Math.min(maxBackoffMs, retryAfterMs(res.headers.get("retry-after")) ?? backoff(attempt));
        this.note(`${method} ${path}: HTTP 503 ${errorCode(parsed) ?? ""}; retrying in ${wait} ms (attempt ${attempt + 1} of ${attempts})`);
        await sleep(wait);
        continue;
      }
      throw this.#refusal(res.status, text, parsed, path);
    }
  }

  /**
   * Opens a REST stream (newline-delimited JSON, as WatchEvents answers over
   * REST) and yields each line's object as it arrives. No answer, or an
   * error answer, rejects as call() would; a failure once it began
   * (the connection cut, or nothing received for `idleMs`: a connection
   * that died without closing) rejects with a {@link StreamBroken}, which
   * the caller may resume from. Never retried here: what to resume from is
   * the caller's to know.
   */
  async *stream(path: string, idleMs: number): AsyncGenerator<Record<string, unknown>> {
    const url = `${this.settings.url}${path}`;
    const idle = new AbortController();
    let timer = setTimeout(() => idle.abort(), idleMs);
    let res: Response;
    try {
      res = await fetch(url, { headers: { authorization: `Bearer ${this.token}`, accept: "application/x-ndjson" }, signal: idle.signal });
    } catch (error) {
      clearTimeout(timer);
      // No answer at all: as for any call, the service is not reached.
      throw idle.signal.aborted ? this.#silent(idleMs, 1, error) : this.#unreachable(networkCause(error), error);
    }
    if (!res.ok || res.body === null || !fromTheService(res)) {
      let text: string;
      try {
        text = await res.text();
      } catch (error) {
        throw this.#unreachable(idle.signal.aborted ? `no answer for ${idleMs / 1000} s` : networkCause(error), error);
      } finally {
        clearTimeout(timer);
      }
      // A proxy's 502, 503 or 504 says the service was not reached, as for a call: a watch resumes from it.
      if (gatewayFailure(res)) throw this.#gateway(res.status, 1);
      throw res.ok ? this.#unexpected(res.status, text) : this.#refusal(res.status, text, parseJson(text), path);
    }
    const decoder = new TextDecoder();
    let buffered = "";
    try {
      for await (const chunk of res.body) {
        clearTimeout(timer);
        timer = setTimeout(() => idle.abort(), idleMs);
        buffered += decoder.decode(chunk, { stream: true });
        for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line === "") continue;
          const parsed = parseJson(line);
          if (typeof parsed !== "object" || parsed === null) throw this.#unexpected(res.status, line);
          yield parsed as Record<string, unknown>;
        }
      }
    } catch (error) {
      if (error instanceof CliError) throw error;
      throw new StreamBroken(idle.signal.aborted ? `nothing received for ${idleMs / 1000} s` : networkCause(error), error);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The error of a refused call: the service's code and message, or a plain "is this the service?" when the body is not the API's. */
  #refusal(status: number, text: string, parsed: unknown, path: string): CliError {
    const code = errorCode(parsed);
    if (code === undefined) return this.#unexpected(status, text);
    const record = parsed as Record<string, unknown>;
    const message = typeof record["error"] === "string" ? record["error"] : `HTTP ${status}`;
    return new ServiceError(status, code, message, record, status === 401 ? [this.#sources()] : [], entityOfPath(path));
  }

  /**
   * Where the refused token and the URL came from: a token is good for the
   * service that trusts its signer, and the usual slip is the right token
   * sent to another service (a second `npm start` on another port, with
   * the URL left at its default).
   */
  #sources(): string {
    const { tokenSource, url, urlSource, devTokenFile } = this.settings;
    // A development token is good only while its service runs without a
    // signer of its own; one left from such a start is refused after.
    const dev =
      tokenSource !== undefined && tokenSource === devTokenFile
        ? ` A development token is accepted only while the service runs without AUTH_JWT_SECRET or AUTH_JWKS_URL, and until it expires: if it now runs with one, delete ${devTokenFile} and pass a token its signer issued (ENTITY_VERSIONS_TOKEN, or --token); if not, restart it (\`npm start\` writes a fresh one).`
        : "";
    return `The token came from ${tokenSource ?? "?"} and the URL, ${url}, from ${urlSource}: a token is accepted only by the service that trusts its signer (the one \`npm start\` wrote, by the service that wrote it); if that service is elsewhere, point at it with --url or ENTITY_VERSIONS_URL.${dev}`;
  }

  #unreachable(cause: string, error: unknown): CliError {
    if (cause === "bad port") {
      // fetch refuses the ports browsers block (6000, 6665-6669, 10080, …): nothing was sent.
      const err = new CliError(
        `cannot call ${this.settings.url}: its port is one that fetch refuses to connect to (the ports browsers block, https://fetch.spec.whatwg.org/#port-blocking); run the service on another PORT, and point the CLI at it with --url or ENTITY_VERSIONS_URL.`,
        "SERVICE_UNREACHABLE",
      );
      err.cause = error;
      return err;
    }
    const where = `the URL came from ${this.settings.urlSource}`;
    // "Start it" only where nothing listens: elsewhere it would send the user the wrong way.
    const what =
      cause === "ECONNREFUSED"
        ? `nothing listens there: start it (\`npm start\`) or point the CLI at it with --url or ENTITY_VERSIONS_URL (${where})`
        : cause === "ENOTFOUND" || cause === "EAI_AGAIN"
          ? `its host name does not resolve here: check the URL (${where}) and this machine's DNS`
          : plainHttpAnswer(cause)
            ? `what answers there speaks plain HTTP, not TLS (the service serves plain HTTP; TLS ends at a proxy in front of it): use an http:// URL, or the proxy's https:// address (${where})`
            : tlsFailure(cause)
            ? `its TLS certificate is not trusted here: when the service's certificate comes from a private CA, give the CLI that CA with NODE_EXTRA_CA_CERTS=/path/to/ca.pem; check that the URL's host name is one the certificate names (${where})`
            : `the connection failed: check that the service runs and that the network between lets it through, and the URL (${where}); or retry`;
    const err = new CliError(`cannot reach the entity-versions service at ${this.settings.url} (${cause}): ${what}.`, "SERVICE_UNREACHABLE");
    err.cause = error;
    return err;
  }

  /** A gateway or load balancer in front of the service answered for it: it runs, and cannot reach the service. */
  #gateway(status: number, attempts: number): CliError {
    return new CliError(
      `a gateway in front of the entity-versions service at ${this.settings.url} answered HTTP ${status}${attempts > 1 ? ` (${attempts} attempts)` : ""} without the service's answer: the service behind it is down, not ready, or not reachable from the gateway; check the service (its logs, its /readyz) and the gateway's route to it, or retry later.`,
      "SERVICE_UNREACHABLE",
    );
  }

  /**
   * A service that took the connection and then said nothing: it runs (or
   * something listens on its port), so "start it" would send the user the
   * wrong way; it is busy or hung, and its own logs say which.
   */
  #silent(timeoutMs: number, attempts: number, error: unknown): CliError {
    const err = new CliError(
      `the service at ${this.settings.url} accepted the connection but did not answer within ${timeoutMs / 1000} s (${attempts} attempt${attempts === 1 ? "" : "s"}): it is overloaded or stuck; check its logs or ${this.settings.url}/readyz, or retry later.`,
      "SERVICE_UNREACHABLE",
    );
    err.cause = error;
    return err;
  }

  #unexpected(status: number, text: string): CliError {
    return new CliError(
      `${this.settings.url} answered HTTP ${status} with ${text === "" ? "an empty body" : `a body that is not the API's JSON (${JSON.stringify(text.slice(0, 120))})`}: is it the entity-versions service? Check --url or ENTITY_VERSIONS_URL.`,
      "UNEXPECTED_RESPONSE",
    );
  }
}

/**
 * Whether a success answer came from the entity-versions service, which
 * names every answer's request (x-request-id): another server's JSON (a
 * wrong --url, a redirect to elsewhere) would otherwise be read as the
 * API's answer, and fail far from its cause.
 */
function fromTheService(res: Response): boolean {
  return res.headers.has("x-request-id");
}

/**
 * A 502 or 504 that a proxy or load balancer made: the service names every
 * answer it gives, so one without x-request-id never reached it, or its
 * answer never came back.
 */
function gatewayFailure(res: Response): boolean {
  // 503 too: a load balancer's "no healthy backend" (the service's own 503 names its request).
  return (res.status === 502 || res.status === 503 || res.status === 504) && !fromTheService(res);
}

/** Whether a TLS connection failed (an untrusted, expired or other host's certificate, or no TLS at all): retrying cannot mend it. */
function tlsFailure(cause: string): boolean {
  return /CERT|SELF_SIGNED|^ERR_TLS_|^ERR_SSL_|UNABLE_TO_(GET|VERIFY)/.test(cause);
}

/** Whether an https:// URL reached a server that answered in plain HTTP (OpenSSL's "wrong version number"). */
function plainHttpAnswer(cause: string): boolean {
  return /WRONG_VERSION_NUMBER|HTTP_REQUEST/.test(cause);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function errorCode(body: unknown): string | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const code = (body as Record<string, unknown>)["code"];
  return typeof code === "string" ? code : undefined;
}

/** The pause before attempt `attempt + 1`: 0.5 s doubling, at most 5 s. */
export function backoff(attempt: number): number {
  return Math.min(maxBackoffMs, 500 * 2 ** (attempt - 1));
}

function retryAfterMs(header: string | null): number | undefined {
  if (header === null) return undefined;
  const seconds = Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

/** The entity a REST path names (`/api/entities/{entity_id}/…`), for the hints of its errors. */
function entityOfPath(path: string): string | undefined {
  const segment = /^\/api\/entities\/([^/?]+)/.exec(path)?.[1];
  if (segment === undefined) return undefined;
  try {
    const id = decodeURIComponent(segment);
    return entityIdPattern.test(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

/** How many unary calls may be running: on one connection, and in the whole process. */
export interface CallGateLimits {
  readonly perConnection: number;
  readonly total: number;
}

/** Why a call was not let in. */
export type CallRefusal = { readonly scope: "connection" | "server"; readonly limit: number };

/** A call let in: its place is given back once, by whichever of its ends comes last. */
export interface CallPass {
  /**
   * The call's handler begins, and holds the place until `end()`; false
   * when the call is already over (its client went away first): the
   * handler then need not run.
   */
  begin(): boolean;
  /** The call's handler returned. */
  end(): void;
  /** The call's answer was written, or its client went away. */
  responded(): void;
}

/**
 * Bounds the unary calls running at once, per connection and in all. A call
 * holds its place from its first header until both its answer is done and
 * its handler has returned: a client that resets an HTTP/2 stream (or
 * stops reading pipelined HTTP/1.1 answers) frees the stream at once, but
 * not the work the call started, so counting streams alone would let one
 * connection start calls without end (the "rapid reset" attack,
 * CVE-2023-44487). Past either limit a call is refused before its
 * authentication or body costs anything.
 */
export class CallGate {
  readonly #limits: CallGateLimits;
  readonly #byConnection = new WeakMap<object, number>();
  #total = 0;

  constructor(limits: CallGateLimits) {
    this.#limits = limits;
  }

  /** Calls running in the whole process. */
  get running(): number {
    return this.#total;
  }

  /** Lets a call on `connection` (the socket, or the HTTP/2 session) in, or says why not. */
  enter(connection: object): CallPass | CallRefusal {
    const mine = this.#byConnection.get(connection) ?? 0;
    if (mine >= this.#limits.perConnection) return { scope: "connection", limit: this.#limits.perConnection };
    if (this.#total >= this.#limits.total) return { scope: "server", limit: this.#limits.total };
    this.#byConnection.set(connection, mine + 1);
    this.#total += 1;
    let handling = false;
    let answered = false;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.#byConnection.set(connection, (this.#byConnection.get(connection) ?? 1) - 1);
      this.#total -= 1;
    };
    return {
      begin: () => {
        if (answered) return false;
        handling = true;
        return true;
      },
      end: () => {
        handling = false;
        if (answered) release();
      },
      responded: () => {
        answered = true;
        if (!handling) release();
      },
    };
  }
}

/** Whether the gate refused a call. */
export function isRefusal(entry: CallPass | CallRefusal): entry is CallRefusal {
  return "scope" in entry;
}

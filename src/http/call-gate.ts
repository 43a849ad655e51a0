/** How many unary calls may be running: on one connection, in the whole process, and waiting for a place. */
export interface CallGateLimits {
  /** Calls one connection may have running or waiting. */
  readonly perConnection: number;
  /** Calls the process runs at once. */
  readonly total: number;
  /** Calls one caller (token `sub`) may have running in the process, over all its connections. */
  readonly perCaller: number;
  /** Calls that may wait, first come first served, for one of the process's places. */
  readonly queued: number;
}

/** Why a call was not let in. */
export type CallRefusal = { readonly scope: "connection" | "server" | "caller"; readonly limit: number };

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
  /**
   * Counts the call against its caller, once authenticated; false when the
   * caller already has `perCaller` calls running (the call is then refused,
   * and gives its place back as any call does).
   */
  claim(callerId: string): boolean;
}

/** A call waiting for a place: `admitted` settles with its pass, or with a refusal once `cancel()` gives up on it. */
export interface CallWait {
  readonly admitted: Promise<CallPass | CallRefusal>;
  /** Stops waiting (the client went away, or waited too long); the call is refused. */
  cancel(): void;
}

interface Waiter {
  readonly connection: object;
  resolve(entry: CallPass | CallRefusal): void;
}

/**
 * Bounds the unary calls running at once, per connection, per caller and
 * in all. A call
 * holds its place from its first header until both its answer is done and
 * its handler has returned: a client that resets an HTTP/2 stream (or
 * stops reading pipelined HTTP/1.1 answers) frees the stream at once, but
 * not the work the call started, so counting streams alone would let one
 * connection start calls without end (the "rapid reset" attack,
 * CVE-2023-44487). A connection past its limit is refused at once, before
 * the call's authentication or body costs anything. When the process is
 * at its limit, calls wait in turn for a place (a busy server answers
 * later rather than not at all), up to `queued` of them; past that they
 * are refused too. A caller (once its token is read) may hold at most
 * `perCaller` places over all its connections, so that one client opening
 * many connections (each sending its bodies slowly, say) leaves the rest
 * of the places to others.
 */
export class CallGate {
  readonly #limits: CallGateLimits;
  readonly #byConnection = new WeakMap<object, number>();
  readonly #byCaller = new Map<string, number>();
  readonly #waiting: Waiter[] = [];
  #total = 0;

  constructor(limits: CallGateLimits) {
    this.#limits = limits;
  }

  /** Calls running in the whole process. */
  get running(): number {
    return this.#total;
  }

  /** Calls waiting for a place. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Lets a call on `connection` (the socket, or the HTTP/2 session) in, has it wait for a place, or says why not. */
  enter(connection: object): CallPass | CallWait | CallRefusal {
    const mine = this.#byConnection.get(connection) ?? 0;
    if (mine >= this.#limits.perConnection) return { scope: "connection", limit: this.#limits.perConnection };
    if (this.#total < this.#limits.total) {
      this.#byConnection.set(connection, mine + 1);
      this.#total += 1;
      return this.#pass(connection);
    }
    if (this.#waiting.length >= this.#limits.queued) return { scope: "server", limit: this.#limits.total };
    // A waiting call counts against its connection already.
    this.#byConnection.set(connection, mine + 1);
    let waiter!: Waiter;
    const admitted = new Promise<CallPass | CallRefusal>((resolve) => {
      waiter = { connection, resolve };
    });
    this.#waiting.push(waiter);
    return {
      admitted,
      cancel: () => {
        const at = this.#waiting.indexOf(waiter);
        if (at === -1) return;
        this.#waiting.splice(at, 1);
        this.#leave(connection);
        waiter.resolve({ scope: "server", limit: this.#limits.total });
      },
    };
  }

  #leave(connection: object): void {
    this.#byConnection.set(connection, (this.#byConnection.get(connection) ?? 1) - 1);
  }

  /** A freed place goes to the call that has waited longest, else back to the pool. */
  #release(connection: object): void {
    this.#leave(connection);
    const next = this.#waiting.shift();
    if (next === undefined) this.#total -= 1;
    else next.resolve(this.#pass(next.connection));
  }

  #pass(connection: object): CallPass {
    let handling = false;
    let answered = false;
    let released = false;
    let caller: string | undefined;
    const release = () => {
      if (released) return;
      released = true;
      if (caller !== undefined) {
        const left = (this.#byCaller.get(caller) ?? 1) - 1;
        if (left === 0) this.#byCaller.delete(caller);
        else this.#byCaller.set(caller, left);
      }
      this.#release(connection);
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
      claim: (callerId) => {
        if (released || caller !== undefined) return true;
        const running = this.#byCaller.get(callerId) ?? 0;
        if (running >= this.#limits.perCaller) return false;
        this.#byCaller.set(callerId, running + 1);
        caller = callerId;
        return true;
      },
    };
  }
}

/** Whether the gate refused a call. */
export function isRefusal(entry: CallPass | CallWait | CallRefusal): entry is CallRefusal {
  return "scope" in entry;
}

/** Whether the call must wait for a place. */
export function isWait(entry: CallPass | CallWait | CallRefusal): entry is CallWait {
  return "admitted" in entry;
}

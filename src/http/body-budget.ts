/** Where a request body's bytes are counted: its connection, and the whole process. */
export interface BodyBudgetLimits {
  /** Bytes one connection may have in flight. */
  readonly perConnection: number;
  /** Bytes the process may have in flight. */
  readonly total: number;
}

/** Why a body was refused more bytes. */
export type BudgetRefusal = { readonly scope: "connection" | "server"; readonly limitBytes: number };

/** One request's share of the budget: what it took, given back at once when the request ends. */
export interface BodyTicket {
  /**
   * Takes `bytes` more for this request; a refusal when the connection or
   * the process is out of budget, and always once the ticket is closed:
   * work still running for a request that has ended (an inflation its
   * client cancelled) must not take what nothing would give back.
   */
  take(bytes: number): BudgetRefusal | undefined;
  /** Whether the request has ended and its share been given back. */
  readonly closed: boolean;
  /** Gives back everything this request took; later calls do nothing. */
  close(): void;
}

/**
 * Bounds the request body bytes held in memory, per connection and in all.
 * Every protocol reads a unary request's whole body before it can answer, so
 * without a bound one HTTP/2 connection with many streams (or many
 * connections) could make the process hold their bodies all at once. A body
 * counts from its first byte read until its request has been answered.
 */
export class BodyBudget {
  readonly #limits: BodyBudgetLimits;
  readonly #byConnection = new WeakMap<object, number>();
  #total = 0;

  constructor(limits: BodyBudgetLimits) {
    this.#limits = limits;
  }

  /** A ticket for one request on `connection` (the socket, or the HTTP/2 session). */
  open(connection: object): BodyTicket {
    let held = 0;
    let closed = false;
    return {
      get closed() {
        return closed;
      },
      take: (bytes) => {
        if (closed) return { scope: "connection", limitBytes: this.#limits.perConnection };
        const mine = this.#byConnection.get(connection) ?? 0;
        if (mine + bytes > this.#limits.perConnection) return { scope: "connection", limitBytes: this.#limits.perConnection };
        if (this.#total + bytes > this.#limits.total) return { scope: "server", limitBytes: this.#limits.total };
        this.#byConnection.set(connection, mine + bytes);
        this.#total += bytes;
        held += bytes;
        return undefined;
      },
      close: () => {
        if (closed) return;
        closed = true;
        if (held === 0) return;
        this.#byConnection.set(connection, (this.#byConnection.get(connection) ?? held) - held);
        this.#total -= held;
      },
    };
  }
}

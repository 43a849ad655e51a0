/** The part of a Node response this needs: it closes, finished or not. */
export interface ClosingResponse {
  readonly writableFinished: boolean;
  readonly closed?: boolean;
  /** An HTTP/2 compatibility response says it on its stream. */
  readonly stream?: { readonly closed: boolean };
  once(event: "close", listener: () => void): unknown;
}

/**
 * A getter for an AbortSignal that aborts when the client goes away before
 * the response is written. The controller and its "close" listener are made
 * on first use only: no handler of this service reads the signal, and an
 * AbortController plus a listener added and removed were ~4% of a read's CPU
 * (profile of GetActiveVersion), paid by every request for nothing.
 */
export function lazyAbortSignal(res: ClosingResponse): () => AbortSignal {
  let controller: AbortController | undefined;
  return () => {
    if (controller === undefined) {
      const made = new AbortController();
      controller = made;
      if ((res.closed ?? res.stream?.closed) === true) {
        if (!res.writableFinished) made.abort();
      } else {
        res.once("close", () => {
          if (!res.writableFinished) made.abort();
        });
      }
    }
    return controller.signal;
  };
}

/** The part of a Node response this needs: it closes, finished or not. */
export interface ClosingResponse {
  readonly writableFinished: boolean;
  readonly closed?: boolean;
  /** An HTTP/2 stream the client reset (its writable side may still count as finished). */
  readonly aborted?: boolean;
  /** An HTTP/2 compatibility response says both on its stream. */
  readonly stream?: { readonly closed: boolean; readonly aborted: boolean };
  once(event: "close", listener: () => void): unknown;
}

/** Closed without the whole answer written, or reset by the client. */
function cutOff(res: ClosingResponse): boolean {
  return !res.writableFinished || res.aborted === true || res.stream?.aborted === true;
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
        if (cutOff(res)) made.abort();
      } else {
        res.once("close", () => {
          if (cutOff(res)) made.abort();
        });
      }
    }
    return controller.signal;
  };
}

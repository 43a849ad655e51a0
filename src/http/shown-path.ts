/** The most characters of a request's path (or method) a log line or an error message repeats. */
export const maxShownLength = 200;

/**
 * A request's path as logs and error messages show it: without its query,
 * and cut after maxShownLength characters. A client chooses its path, and
 * over HTTP/2 can send a long one again and again for a byte each (HPACK):
 * repeated whole, it would make every log line and refusal as long as the
 * client likes.
 */
export function shownPath(url: string): string {
  return shown(url.split("?", 1)[0]!);
}

/** Any client-chosen text (a method), cut after maxShownLength characters. */
export function shown(text: string): string {
  return text.length > maxShownLength ? `${text.slice(0, maxShownLength)}…` : text;
}

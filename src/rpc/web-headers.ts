import type { IncomingHttpHeaders } from "node:http";

/**
 * Node's request headers as a fetch Headers object, the form interceptors
 * and handlers read, without HTTP/2 pseudo-headers (":path", …).
 */
export function webHeaders(raw: IncomingHttpHeaders): Headers {
  const pairs: Array<[string, string]> = [];
  for (const key in raw) {
    if (key.charCodeAt(0) === 58 /* ":" */) continue;
    const value = raw[key];
    if (typeof value === "string") pairs.push([key, value]);
    else if (Array.isArray(value)) for (const v of value) pairs.push([key, v]);
  }
  return new Headers(pairs);
}

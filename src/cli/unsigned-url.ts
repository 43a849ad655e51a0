/**
 * A blob URL without its query, where a SAS URL carries its signature:
 * what the CLI may print or put in an error, since anyone who reads a
 * signed URL (in a CI log, say) can use it until it expires.
 */
export function unsignedUrl(url: string): string {
  const u = new URL(url);
  u.search = "";
  return u.toString();
}

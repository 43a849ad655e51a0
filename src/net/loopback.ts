/**
 * Whether a host name or address is this machine's loopback (localhost,
 * 127.0.0.0/8, ::1, bracketed or not): a link to it never leaves the
 * machine, and a server bound to it serves this machine only.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  return bare === "localhost" || bare === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}

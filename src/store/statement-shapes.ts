/**
 * The smallest power of two at or above `n` (n ≥ 1). Whatever varies in a
 * statement's text (batch size, org count, page size) is rounded up to one,
 * so that a handful of prepared statements serve every value: a connection
 * keeps 128, and the server caps them across all sessions.
 */
export function nextPowerOfTwo(n: number): number {
  return 2 ** Math.ceil(Math.log2(n));
}

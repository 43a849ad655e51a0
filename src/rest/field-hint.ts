import { editDistance } from "../edit-distance.js";

/** The other spelling of a name: lowerCamelCase as snake_case. */
const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/**
 * The name among `names` a caller most likely meant by `name`: a typo, a
 * name cut short (`base_version` for `base_version_id`), or another
 * spelling; undefined when none is close.
 */
export function closestName(name: string, names: readonly string[]): string | undefined {
  const wanted = snake(name).toLowerCase();
  let best: { name: string; score: number } | undefined;
  for (const candidate of names) {
    const prefix = wanted.length >= 3 && (candidate.startsWith(wanted) || wanted.startsWith(candidate));
    const allowed = Math.max(2, Math.floor(candidate.length / 4));
    // The distance is at least the difference in length: a name much longer
    // than every field (a megabyte-long key) costs no quadratic work.
    if (!prefix && Math.abs(wanted.length - candidate.length) > allowed) continue;
    const score = prefix ? 1 : editDistance(wanted, candidate);
    if (score <= allowed && (best === undefined || score < best.score)) best = { name: candidate, score };
  }
  return best?.name;
}

/**
 * What to tell a caller who sent a field (or query parameter) the request
 * does not have: what they may have meant, and the names it does have, so
 * the fix needs no trip to the docs.
 */
export function unknownNameProblem(kind: "field" | "query parameter", name: string, names: readonly string[]): string {
  if (names.length === 0) return `this request has no ${kind}s`;
  const guess = closestName(name, names);
  return `no such ${kind}${guess === undefined ? "" : ` (did you mean ${guess}?)`}; this request's ${kind}s are ${names.join(", ")}`;
}

/**
 * A name the caller sent, as an error shows it: cut to its first 64
 * characters, so that a huge unknown key is not sent back, nor logged,
 * whole.
 */
export function shownName(name: string): string {
  return name.length <= 64 ? name : `${name.slice(0, 64)}…`;
}

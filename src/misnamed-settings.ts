import { editDistance } from "./edit-distance.js";

/**
 * Settings set under a name the service does not read, but close to one it
 * does: a typo (AUTH_JWKS_MAX_AGE_SECOND) or another unit's suffix
 * (AUTH_MAX_TOKEN_LIFETIME_SECONDS for AUTH_MAX_TOKEN_LIFETIME,
 * REQUEST_DEADLINE_SECONDS for REQUEST_DEADLINE_MS). Such a setting is
 * otherwise ignored without a word, and its default applies: a bound the
 * operator meant to tighten stays loose. The environment holds much else
 * (PATH, a platform's own variables), so only near misses of the names the
 * configuration read are reported.
 */
export interface MisnamedSetting {
  /** The variable as set. */
  readonly name: string;
  /** The setting it most likely meant. */
  readonly meant: string;
  /** "case": the same name in other letter case; "unit": the same words with another unit (or none); "spelling": a letter or two apart. */
  readonly kind: "case" | "unit" | "spelling";
}

const unitSuffix = /_(MS|MILLIS|MILLISECONDS|S|SEC|SECS|SECOND|SECONDS|MIN|MINS|MINUTES|H|HOURS|DAYS|BYTES|KB|KIB|MB|MIB)$/;

/** Names closer than this many single-letter edits count as one misspelt (long names only: short ones are too often unrelated). */
const spellingDistance = 2;
const spellingMinLength = 10;

/** The variables among `set` that look like misnamed settings of `read`. */
export function misnamedSettings(set: readonly string[], read: ReadonlySet<string>): MisnamedSetting[] {
  const found: MisnamedSetting[] = [];
  const known = [...read];
  for (const name of set) {
    if (read.has(name)) continue;
    // Names are read as written (process.env is case-sensitive off Windows),
    // so a setting in lower case is ignored like any other near miss; the
    // other rules compare without case too (auth_max_token_lifetime_seconds).
    const upper = name.toUpperCase();
    const cased = known.find((k) => k.toUpperCase() === upper);
    if (cased !== undefined) {
      found.push({ name, meant: cased, kind: "case" });
      continue;
    }
    const base = upper.replace(unitSuffix, "");
    const unit = known.find((k) => k.toUpperCase().replace(unitSuffix, "") === base);
    if (unit !== undefined) {
      found.push({ name, meant: unit, kind: "unit" });
      continue;
    }
    if (name.length < spellingMinLength) continue;
    const spelt = known.find((k) => k.length >= spellingMinLength && Math.abs(k.length - name.length) <= spellingDistance && editDistance(k.toUpperCase(), upper) <= spellingDistance);
    if (spelt !== undefined) found.push({ name, meant: spelt, kind: "spelling" });
  }
  return found;
}

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

/** Long names closer than this many single-letter edits count as one misspelt. */
const spellingDistance = 2;
const spellingMinLength = 10;

/** Short names this long or longer may be one edit apart (LOG_LEVL, DATA_DIRR, NODE_EMV); shorter ones only two letters swapped (PROT). */
const shortEditMinLength = 7;

/**
 * Whether `name` reads as `setting` misspelt: two edits for long names;
 * for short ones (NODE_ENV, PORT, HOST), where two edits join unrelated
 * names (HOME, HOST), one edit from 7 letters on, and below that only two
 * neighbouring letters swapped, the typo fingers make most.
 */
function spelledNear(setting: string, name: string): boolean {
  if (setting.length >= spellingMinLength && name.length >= spellingMinLength) {
    return Math.abs(setting.length - name.length) <= spellingDistance && editDistance(setting, name) <= spellingDistance;
  }
  if (swapsTwoNeighbours(setting, name)) return true;
  return setting.length >= shortEditMinLength && name.length >= shortEditMinLength && Math.abs(setting.length - name.length) <= 1 && editDistance(setting, name) <= 1;
}

/** Whether `b` is `a` with one pair of neighbouring letters swapped. */
function swapsTwoNeighbours(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return i + 1 < a.length && a[i] === b[i + 1] && a[i + 1] === b[i] && a.slice(i + 2) === b.slice(i + 2);
}

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
    const spelt = known.find((k) => spelledNear(k.toUpperCase(), upper));
    if (spelt !== undefined) found.push({ name, meant: spelt, kind: "spelling" });
  }
  return found;
}

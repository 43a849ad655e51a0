const pad = (n: number) => String(n).padStart(2, "0");

/** The version string (spec section 9, `YYYY.MM.DD-HHMMSS`) of an instant, in UTC: a push's default version. */
export function versionStringAt(date: Date): string {
  return (
    `${date.getUTCFullYear()}.${pad(date.getUTCMonth() + 1)}.${pad(date.getUTCDate())}-` +
    `${pad(date.getUTCHours())}${pad(date.getUTCMinutes())}${pad(date.getUTCSeconds())}`
  );
}

/**
 * The version string one second after `version`. Version strings have
 * one-second resolution and are unique per entity, so two pushes in the
 * same second (a script, a quick fix) would collide; the CLI moves a
 * default version on by a second instead of failing.
 */
export function secondAfter(version: string): string {
  const m = /^(\d{4})\.(\d{2})\.(\d{2})-(\d{2})(\d{2})(\d{2})$/.exec(version);
  if (m === null) throw new Error(`not a version string: ${version}`);
  const [y, mo, d, h, mi, s] = m.slice(1).map(Number) as [number, number, number, number, number, number];
  return versionStringAt(new Date(Date.UTC(y, mo - 1, d, h, mi, s) + 1000));
}

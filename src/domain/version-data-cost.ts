/**
 * What a version's variable data costs to serve, in bytes: the bytes of
 * its package_json and service_dependencies as stored (`stored`, their
 * text; the values themselves are given parsed), plus
 * {@link bytesPerJsonValue} for each JSON value in them. Decoding and
 * encoding (JSON to Struct to JSON or binary) costs per value as much as
 * per byte: a manifest of 87,000 empty objects and one of a single
 * 261 kB string have the same bytes, but the first took thirty times the
 * CPU to answer, and its binary form is several times its JSON. A page of
 * ListVersions is cut at PAGE_MAX_BYTES of this cost.
 */
export function versionDataCost(stored: { readonly serviceDependencies: string; readonly packageJson: string | null }, serviceDependencies: readonly string[], packageJson: unknown): number {
  const bytes = Buffer.byteLength(stored.serviceDependencies) + (stored.packageJson === null ? 0 : Buffer.byteLength(stored.packageJson));
  const values = serviceDependencies.length + (packageJson === undefined || packageJson === null ? 0 : jsonShape(packageJson).values);
  return bytes + values * bytesPerJsonValue;
}

/** The cost of one JSON value beyond its text (versionDataCost). */
export const bytesPerJsonValue = 64;

/** A JSON value's number of values (itself and everything inside it) and its depth (1 for a scalar). */
export interface JsonShape {
  readonly values: number;
  readonly depth: number;
}

/** The shape of a JSON value: how many values it holds and how deep they nest. */
export function jsonShape(value: unknown): JsonShape {
  let values = 0;
  let depth = 0;
  // Iterative: a value nested deeper than the call stack must not throw here.
  const pending: Array<[unknown, number]> = [[value, 1]];
  while (pending.length > 0) {
    const [current, level] = pending.pop()!;
    values++;
    if (level > depth) depth = level;
    if (current === null || typeof current !== "object") continue;
    for (const member of Array.isArray(current) ? current : Object.values(current)) pending.push([member, level + 1]);
  }
  return { values, depth };
}

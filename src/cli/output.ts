import path from "node:path";
import type { RestVersion } from "./rest-types.js";

/**
 * Where a command's words go. The result goes to stdout: with `--json`
 * exactly one JSON document (the REST answer of the command's final call),
 * otherwise text for people. Notes on the way (packed, uploading, retrying)
 * go to stderr, and only without `--json`: there stderr carries nothing but
 * the error document when the command fails, so a script can parse it.
 */
export class Output {
  constructor(
    readonly json: boolean,
    private readonly stdout: NodeJS.WritableStream = process.stdout,
    private readonly stderr: NodeJS.WritableStream = process.stderr,
  ) {}

  /** Prints the command's result: `document` with --json, else the human text. */
  result(document: unknown, human: () => string): void {
    this.stdout.write(this.json ? `${JSON.stringify(document, null, 2)}\n` : `${human()}\n`);
  }

  /**
   * One item of a streamed result (watch): with --json a compact JSON line
   * (newline-delimited JSON), else the human line, or nothing when `human`
   * gives undefined.
   */
  item(document: unknown, human: () => string | undefined): void {
    if (this.json) {
      this.stdout.write(`${JSON.stringify(document)}\n`);
      return;
    }
    const line = human();
    if (line !== undefined) this.stdout.write(`${line}\n`);
  }

  /** A line about progress, on stderr; none with --json. */
  note(line: string): void {
    if (!this.json) this.stderr.write(`${line}\n`);
  }

  /**
   * Something the user must know although the command succeeded, on
   * stderr, with --json too (stdout keeps its one document; a script that
   * parses it is not disturbed).
   */
  warn(line: string): void {
    this.stderr.write(`warning: ${line}\n`);
  }
}

/** A path as the user would type it from here: relative to the current directory when inside it. */
export function displayPath(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative === "" || relative.startsWith("..") || path.isAbsolute(relative) ? file : relative;
}

/** Bytes for people: 512 B, 3.4 kB, 12.0 MB (powers of 1000, as npm and Docker print them). */
export function formatBytes(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let value = bytes / 1000;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** Left-aligned columns separated by two spaces, the header in capitals, as `docker ps` and `kubectl get` print. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header.map((h) => h.toUpperCase())), ...rows.map(line)].join("\n");
}

/** A version in one line: `2026.11.22-101500 (id 7f3c…)`. */
export function describeVersion(v: Pick<RestVersion, "version" | "id">): string {
  return `${v.version} (id ${v.id})`;
}

/** A version's fields, one per line, for `get` and after a push. */
export function formatVersionDetails(v: RestVersion): string {
  const rows: [string, string][] = [
    ["entity", v.entity_id],
    ["version", v.version],
    ["id", v.id],
    ["active", v.is_active ? "yes" : "no"],
    ["published by", v.published_by],
    ["created at", v.created_at],
    ["size", `${formatBytes(Number(v.file_size_bytes))} (${v.file_size_bytes} bytes)`],
    ["source hash", v.source_hash],
    ["base version", v.base_version_id ?? "(none: a first push)"],
  ];
  if (v.package_md5 !== undefined) rows.push(["package md5", v.package_md5]);
  if (v.package_lock_path !== undefined) rows.push(["lockfile", v.package_lock_path]);
  if (v.service_dependencies.length > 0) rows.push(["depends on", v.service_dependencies.join(", ")]);
  rows.push(["storage path", v.storage_path]);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, value]) => `${`${k}:`.padEnd(width + 2)}${value}`).join("\n");
}

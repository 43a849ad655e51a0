/** A piece of SQL and the values of its `?` placeholders, in order. */
export interface Sql {
  readonly text: string;
  readonly params: readonly unknown[];
}

const isSql = (value: unknown): value is Sql =>
  typeof value === "object" && value !== null && typeof (value as Sql).text === "string" && Array.isArray((value as Sql).params);

/**
 * Writes SQL with its values in place: `sql\`… where e.id = ${entityId}\``
 * becomes `… where e.id = ?` with `[entityId]`, and an embedded fragment
 * brings its own text and values where it stands. A fragment's values can
 * therefore never be spliced into a statement in the wrong order, which for
 * the access facts would be an authorization bug.
 */
export function sql(strings: TemplateStringsArray, ...values: readonly unknown[]): Sql {
  let text = strings[0]!;
  const params: unknown[] = [];
  values.forEach((value, i) => {
    if (isSql(value)) {
      text += value.text;
      params.push(...value.params);
    } else {
      text += "?";
      params.push(value);
    }
    text += strings[i + 1]!;
  });
  return { text, params };
}

/** SQL text with no values: column lists and other text the code itself writes. */
export function rawSql(text: string): Sql {
  return { text, params: [] };
}

/** Fragments joined with a separator, their values in order. */
export function joinSql(parts: readonly Sql[], separator: string): Sql {
  return { text: parts.map((p) => p.text).join(separator), params: parts.flatMap((p) => p.params) };
}

/** Rows of a raw query: mysql2 answers [rows, fields], better-sqlite3 the rows. */
export function rawRows<T>(result: unknown): T[] {
  return (Array.isArray(result) && Array.isArray(result[0]) ? result[0] : result) as T[];
}

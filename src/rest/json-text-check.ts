/** What a JSON text says that `JSON.parse` would read otherwise, without a word. */
export type JsonTextProblem =
  /** A key given twice in one object: `JSON.parse` keeps the last. */
  | { readonly duplicateKey: string }
  /** An integer a JSON number (a double) holds only rounded: `JSON.parse` reads other digits. */
  | { readonly roundedInteger: string };

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;

/**
 * The first thing in a JSON text that `JSON.parse` would silently read as
 * something else, or undefined. A key given twice in one object would be
 * read as whichever came last; protojson (grpc-gateway's parser) refuses
 * it, and so does the REST gateway. Keys are compared as decoded ("a" and
 * "\u0061" are one key). An integer beyond 2^53 written in full
 * (12345678901234567890) would be read rounded, and stored so: proto3 JSON
 * writes such numbers as strings, and so must a client.
 *
 * Reads only text that `JSON.parse` has accepted: it tracks strings,
 * objects, arrays and numbers, and trusts the rest of the grammar.
 */
export function checkJsonText(text: string): JsonTextProblem | undefined {
  // One entry per open object (its keys so far) or array (null).
  const open: Array<Set<string> | null> = [];
  let keyNext = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let end = i + 1;
      let escaped = false;
      for (; end < text.length; end++) {
        const d = text.charCodeAt(end);
        if (d === 0x5c /* \ */) {
          escaped = true;
          end++;
        } else if (d === 0x22) break;
      }
      if (keyNext) {
        const key = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : text.slice(i + 1, end);
        const keys = open[open.length - 1]!;
        if (keys.has(key)) return { duplicateKey: key };
        keys.add(key);
        keyNext = false;
      }
      i = end;
    } else if (c === 0x2d /* - */ || isDigit(c)) {
      let end = i + 1;
      while (end < text.length && (isDigit(text.charCodeAt(end)) || ".eE+-".includes(text[end]!))) end++;
      const token = text.slice(i, end);
      // 2^53 has 16 digits: only longer integers can be read rounded. One
      // past a double's range (over 309 digits) is read as Infinity; the
      // exact comparison runs only below that, where BigInt is cheap.
      if (end - i > 15 && /^-?\d+$/.test(token)) {
        const read = Number(token);
        if (!Number.isFinite(read) || BigInt(token) !== BigInt(read)) return { roundedInteger: token };
      }
      i = end - 1;
    } else if (c === 0x7b /* { */) {
      open.push(new Set());
      keyNext = true;
    } else if (c === 0x5b /* [ */) {
      open.push(null);
      keyNext = false;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop();
      keyNext = false;
    } else if (c === 0x2c /* , */) {
      keyNext = open.length > 0 && open[open.length - 1] !== null;
    }
  }
  return undefined;
}

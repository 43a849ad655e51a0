/**
 * The first key that appears twice in one object of a JSON text, or
 * undefined when every object's keys are distinct. `JSON.parse` keeps the
 * last of two equal keys without a word, so a request that says one thing
 * twice would be read as whichever came last; protojson (grpc-gateway's
 * parser) refuses it, and so does the REST gateway. Keys are compared as
 * decoded ("a" and "\u0061" are one key).
 *
 * Reads only text that `JSON.parse` has accepted: it tracks strings,
 * objects and arrays, and trusts the rest of the grammar.
 */
export function firstDuplicateKey(text: string): string | undefined {
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
        if (keys.has(key)) return key;
        keys.add(key);
        keyNext = false;
      }
      i = end;
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

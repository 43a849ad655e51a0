import type { DescEnum, DescEnumValue, DescField, DescMessage, DescMethod, DescService } from "@bufbuild/protobuf";
import { getComments } from "@bufbuild/protoplugin";

/**
 * The leading comment of a proto element as a description: the proto is
 * where the API is documented, so the document repeats its words. Each
 * line loses the one space after `//`; undefined when there is none.
 */
export function describe(desc: DescService | DescMethod | DescMessage | DescField | DescEnum | DescEnumValue): string | undefined {
  const leading = getComments(desc).leading;
  if (leading === undefined) return undefined;
  const text = leading
    .split("\n")
    .map((line) => line.replace(/^ /, "").trimEnd())
    .join("\n")
    .trim();
  return text === "" ? undefined : text;
}

/** The first sentence of a description: an operation's summary in lists. */
export function firstSentence(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  const flat = text.replace(/\s+/g, " ");
  const end = /[.!?](\s|$)/.exec(flat);
  return end === null ? flat : flat.slice(0, end.index + 1);
}

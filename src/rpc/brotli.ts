import { promisify } from "node:util";
import { brotliCompress, constants } from "node:zlib";

const compress = promisify(brotliCompress);

/**
 * Brotli quality for answers. Node's default, 11, costs about 80 times
 * gzip's CPU per byte for a few percent smaller answers, and any client
 * may ask for br, health and reflection needing no token: one client
 * could spend the process's CPU. Quality 4 costs about what gzip does.
 */
export const brotliAnswerQuality = 4;

/** A brotli answer, compressed at brotliAnswerQuality. */
export async function compressBrotliAnswer(bytes: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  return new Uint8Array(await compress(bytes, { params: { [constants.BROTLI_PARAM_QUALITY]: brotliAnswerQuality } }));
}

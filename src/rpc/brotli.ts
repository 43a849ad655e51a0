import { promisify } from "node:util";
import { brotliCompress, constants } from "node:zlib";
import { compressionBrotli } from "@connectrpc/connect-node";

const compress = promisify(brotliCompress);

/**
 * Brotli quality for answers. Node's default, 11, costs about 80 times
 * gzip's CPU per byte for a few percent smaller answers, and any client
 * may ask for br, health and reflection needing no token: one client
 * could spend the process's CPU. Quality 4 costs about what gzip does.
 */
export const brotliAnswerQuality = 4;

/**
 * connect-node's brotli with its answers compressed at brotliAnswerQuality;
 * requests are decompressed as connect-node does (bounded by readMaxBytes).
 */
export const compressionBrotliBounded: typeof compressionBrotli = {
  name: compressionBrotli.name,
  compress: async (bytes) => new Uint8Array(await compress(bytes, { params: { [constants.BROTLI_PARAM_QUALITY]: brotliAnswerQuality } })),
  decompress: (bytes, readMaxBytes) => compressionBrotli.decompress(bytes, readMaxBytes),
};

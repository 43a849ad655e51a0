import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { pipeline } from "node:stream/promises";

/** A digest of a file's bytes, streamed (packages may be large). */
async function digestOfFile(file: string, algorithm: "sha256" | "md5", encoding: "hex" | "base64"): Promise<string> {
  const hash = createHash(algorithm);
  await pipeline(createReadStream(file), hash);
  return hash.digest(encoding);
}

/** SHA-256 of a file, lowercase hex: a file's content hash, and the source hash of a file push. */
export function sha256OfFile(file: string): Promise<string> {
  return digestOfFile(file, "sha256", "hex");
}

/** MD5 of a file, base64: the form of Azure's Content-MD5, set on every upload so downloads can be checked. */
export function md5OfFile(file: string): Promise<string> {
  return digestOfFile(file, "md5", "base64");
}

import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { makeDirectory } from "./ops/make-directory.js";

/**
 * Reads a random secret from a file under the data folder, creating it on
 * first use (mode 0600). For development defaults only: production
 * configures its secrets.
 */
export function localSecret(file: string): Buffer {
  try {
    return Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
  } catch {
    makeDirectory(path.dirname(file));
    const secret = randomBytes(32);
    try {
      fs.writeFileSync(file, secret.toString("base64"), { mode: 0o600, flag: "wx" });
      return secret;
    } catch {
      // Another process created it first: use theirs.
      return Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
    }
  }
}

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
    return readSecret(file);
  } catch {
    return createLocalSecret(file);
  }
}

const readSecret = (file: string) => Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");

/**
 * The secret a service already wrote to `file`, or undefined when there is
 * none: what a tool that must sign as the running service reads, since a
 * secret it made itself would sign tokens that service refuses.
 */
export function existingLocalSecret(file: string): Buffer | undefined {
  try {
    return readSecret(file);
  } catch (error) {
    const { code } = error as { code?: unknown };
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    throw error;
  }
}

function createLocalSecret(file: string): Buffer {
  makeDirectory(path.dirname(file));
  const secret = randomBytes(32);
  try {
    fs.writeFileSync(file, secret.toString("base64"), { mode: 0o600, flag: "wx" });
    return secret;
  } catch {
    // Another process created it first: use theirs.
    return readSecret(file);
  }
}

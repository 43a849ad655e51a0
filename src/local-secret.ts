import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { createWhole } from "./ops/create-whole.js";
import { makeDirectory } from "./ops/make-directory.js";

/** The bytes of a secret made here; one read back shorter was cut short (a full disk, an edit) and signs with a key anyone can guess. */
const secretBytes = 32;

/** A secret file under the data folder that holds too short a secret. */
export class LocalSecretError extends Error {
  override name = "LocalSecretError";
}

/** What the development secret (auth-dev-secret) signs, as a message names it. */
export const devTokensSigned = "development tokens (the dev-token file's, npm run token's)";

/**
 * Reads a random secret from a file under the data folder, creating it on
 * first use (mode 0600). For development defaults only: production
 * configures its secrets. `signs` says what is signed with it, for the
 * message that asks to delete a broken one.
 */
export function localSecret(file: string, signs: string): Buffer {
  return existingLocalSecret(file, signs) ?? createLocalSecret(file, signs);
}

function readSecret(file: string, signs: string): Buffer {
  const secret = Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64");
  if (secret.length < secretBytes) {
    throw new LocalSecretError(
      `${file} holds ${secret.length === 0 ? "no secret (it is empty)" : `a secret of ${secret.length} bytes`}, not the ${secretBytes} random bytes the service writes there ` +
        `(a write cut short, a full disk, an edit), and a short key is one anyone may guess: delete the file, and the next start of the service writes a new one; ` +
        `${signs} signed with the old one are then refused.`,
    );
  }
  return secret;
}

/**
 * The secret a service already wrote to `file`, or undefined when there is
 * none: what a tool that must sign as the running service reads, since a
 * secret it made itself would sign tokens that service refuses.
 */
export function existingLocalSecret(file: string, signs: string): Buffer | undefined {
  try {
    return readSecret(file, signs);
  } catch (error) {
    const { code } = error as { code?: unknown };
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    throw error;
  }
}

function createLocalSecret(file: string, signs: string): Buffer {
  makeDirectory(path.dirname(file));
  const secret = randomBytes(secretBytes);
  try {
    // Whole or not at all: a write that fails (a full disk) leaves no file.
    createWhole(file, secret.toString("base64"), 0o600);
    return secret;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // Another process created it first: use theirs.
    return readSecret(file, signs);
  }
}

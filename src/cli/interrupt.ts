import fs from "node:fs";

/** Scratch files and folders to remove if the command is interrupted. */
const leftovers = new Set<string>();
let installed = false;

/** The exit code of a command stopped by a signal, as shells report it: 128 + the signal's number. */
const exitCodes = { SIGINT: 130, SIGTERM: 143 } as const;

/**
 * Removes `file` (a scratch file or folder: a download's `.part`, a
 * push's packed archive) if the command is interrupted (Ctrl-C, or
 * SIGTERM from a CI runner) before it is done with it, then exits as the
 * signal would have (130, 143). A `finally` does not run when a signal
 * ends the process, so without this a download left a hidden `.part`
 * beside its target. Returns the function that forgets it, once the
 * command has removed or kept it itself.
 */
export function removeOnInterrupt(file: string): () => void {
  if (!installed) {
    installed = true;
    for (const signal of Object.keys(exitCodes) as (keyof typeof exitCodes)[]) {
      process.once(signal, () => {
        for (const leftover of leftovers) fs.rmSync(leftover, { recursive: true, force: true });
        process.exit(exitCodes[signal]);
      });
    }
  }
  leftovers.add(file);
  return () => void leftovers.delete(file);
}

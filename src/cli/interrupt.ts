import fs from "node:fs";

/** Scratch files and folders to remove if the command is interrupted. */
const leftovers = new Set<string>();
let installed = false;

const signals = ["SIGINT", "SIGTERM"] as const;

/** Removes what is left, then dies of the signal, as the process would have without a handler. */
function onSignal(signal: (typeof signals)[number]): void {
  for (const leftover of leftovers) fs.rmSync(leftover, { recursive: true, force: true });
  for (const s of signals) process.removeListener(s, handlers[s]);
  installed = false;
  // Killed by the signal, not exiting 130: a shell running the command in
  // a loop stops on Ctrl-C only when its child died of SIGINT.
  process.kill(process.pid, signal);
  // As PID 1 (a container's only process) the kernel ignores a signal with
  // no handler: exit as a shell would report it, not carry on without the files.
  setTimeout(() => process.exit(signal === "SIGINT" ? 130 : 143), 100);
}

const handlers = { SIGINT: () => onSignal("SIGINT"), SIGTERM: () => onSignal("SIGTERM") };

/**
 * Removes `file` (a scratch file or folder: a download's `.part`, a
 * push's packed archive) if the command is interrupted (Ctrl-C, or
 * SIGTERM from a CI runner) before it is done with it, then lets the
 * signal end the process as it would have (a shell reports 130, 143). A
 * `finally` does not run when a signal ends the process, so without this
 * a download left a hidden `.part` beside its target. Returns the
 * function that forgets it, once the command has removed or kept it
 * itself; with nothing left to remove, signals act as if never handled.
 */
export function removeOnInterrupt(file: string): () => void {
  if (!installed) {
    installed = true;
    for (const signal of signals) process.on(signal, handlers[signal]);
  }
  leftovers.add(file);
  return () => {
    leftovers.delete(file);
    if (leftovers.size > 0 || !installed) return;
    for (const signal of signals) process.removeListener(signal, handlers[signal]);
    installed = false;
  };
}

import type { WriteStream } from "node:tty";
import { formatBytes } from "./output.js";

/** Packages smaller than this go up or down too fast for a bar to say anything. */
const minimumBytes = 1024 * 1024;
const width = 30;
/** Redraws at most this often: a terminal write per block would cost more than the upload. */
const redrawMs = 100;

/**
 * A one-line progress bar on stderr, drawn only when stderr is a terminal,
 * the transfer is large and the command is not run with `--json`, so logs,
 * pipes and `--json` consumers never see carriage returns: with `--json`
 * stderr carries the error document alone, which a terminal does not change
 * (a script may leave stderr on one while it reads stdout).
 */
export class ProgressBar {
  readonly #stream: WriteStream | undefined;
  #lastDraw = 0;
  #drawn = -1;

  constructor(
    private readonly label: string,
    private readonly total: number,
    /** The command's --json: no bar at all. */
    json: boolean,
    stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.#stream = !json && stream.isTTY === true && total >= minimumBytes ? (stream as WriteStream) : undefined;
  }

  /** Shows `loaded` of the total bytes. */
  update(loaded: number): void {
    if (this.#stream === undefined) return;
    const now = Date.now();
    if (now - this.#lastDraw < redrawMs && loaded < this.total) return;
    this.#lastDraw = now;
    this.#drawn = loaded;
    const fraction = Math.min(1, loaded / this.total);
    const filled = Math.round(fraction * width);
    this.#stream.write(
      `\r${this.label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}% ${formatBytes(loaded)}/${formatBytes(this.total)}`,
    );
  }

  /** Ends the line, so what follows starts on its own. */
  done(): void {
    if (this.#stream === undefined) return;
    if (this.#drawn < this.total) this.update(this.total);
    this.#stream.write("\n");
  }
}

// The entity-versions CLI's entry point (bin/entity-versions.js loads it):
// runs the command line and leaves the exit code for Node to exit with, so
// stdout is flushed before the process ends, also into a pipe.
import { run } from "./program.js";

// A reader that stops early (`| head`) closes the pipe: that ends the
// output, it is not a crash. Output that cannot be written (a full disk)
// is said as any error is, not as a stack trace.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
  process.stderr.write(`error: cannot write the output: ${error.message} (${error.code ?? "OUTPUT_FAILED"})\n`);
  process.exit(1);
});

process.exitCode = await run(process.argv.slice(2));

import type { FastifyBaseLogger } from "fastify";

type Pino = FastifyBaseLogger & { isLevelEnabled(level: string): boolean };

/**
 * A request's logger that makes its pino child (with the request id bound)
 * only when something is written through it. Fastify makes one per request,
 * and pino's child() serialises the bindings into a new string: work and
 * garbage on every request, although most never log through it (the one
 * request line is written with the id as a field instead).
 */
class LazyChildLogger {
  #child: Pino | undefined;
  readonly #parent: Pino;
  readonly #bindings: Record<string, unknown>;
  readonly #options: object;

  constructor(parent: Pino, bindings: Record<string, unknown>, options: object) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  /** The real child, made on first use. */
  #materialized(): Pino {
    return (this.#child ??= this.#parent.child(this.#bindings, this.#options) as Pino);
  }

  #write(level: "fatal" | "error" | "warn" | "info" | "debug" | "trace", args: unknown[]): void {
    // Below the level nothing is written, so no child is needed for it.
    if (!(this.#child ?? this.#parent).isLevelEnabled(level)) return;
    (this.#materialized()[level] as (...a: unknown[]) => void)(...args);
  }

  fatal(...args: unknown[]): void {
    this.#write("fatal", args);
  }
  error(...args: unknown[]): void {
    this.#write("error", args);
  }
  warn(...args: unknown[]): void {
    this.#write("warn", args);
  }
  info(...args: unknown[]): void {
    this.#write("info", args);
  }
  debug(...args: unknown[]): void {
    this.#write("debug", args);
  }
  trace(...args: unknown[]): void {
    this.#write("trace", args);
  }
  silent(): void {}

  isLevelEnabled(level: string): boolean {
    return (this.#child ?? this.#parent).isLevelEnabled(level);
  }

  bindings(): Record<string, unknown> {
    return (this.#materialized() as unknown as { bindings(): Record<string, unknown> }).bindings();
  }

  get level(): string {
    return (this.#child ?? this.#parent).level;
  }

  set level(level: string) {
    this.#materialized().level = level;
  }

  child(bindings: Record<string, unknown>, options?: object): FastifyBaseLogger {
    return this.#materialized().child(bindings, options);
  }
}

/** Fastify's childLoggerFactory, giving each request a LazyChildLogger. */
export function lazyChildLoggerFactory(logger: FastifyBaseLogger, bindings: object, options: object): FastifyBaseLogger {
  // A route with a log level of its own gets its child at once: the lazy
  // one decides what to skip by the parent's level.
  const level = (options as { level?: string }).level;
  if (level !== undefined && level !== logger.level) return logger.child(bindings, options);
  // Only pino's level test lets the child wait; any other logger gets its child now.
  if (typeof (logger as Partial<Pino>).isLevelEnabled !== "function") return logger.child(bindings, options);
  return new LazyChildLogger(logger as Pino, bindings as Record<string, unknown>, options) as unknown as FastifyBaseLogger;
}

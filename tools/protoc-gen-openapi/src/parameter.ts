/** The plugin's options (buf.gen.yaml `opt`). */
export interface PluginOptions {
  /** Output file name without extension: NAME.json and NAME.yaml are written. */
  readonly file: string;
  /** The document's info.title. */
  readonly title: string;
  /** The document's info.version. */
  readonly version: string;
}

const defaults: PluginOptions = { file: "openapi", title: "API", version: "v1" };

/**
 * Parses `key=value` options, comma-separated as protoc passes them.
 * An unknown key is an error: a misspelt option silently ignored would
 * write a document nobody asked for.
 */
export function parseParameter(parameter: string): PluginOptions {
  const options: Record<string, string> = { ...defaults };
  for (const part of parameter.split(",")) {
    if (part.trim() === "") continue;
    const eq = part.indexOf("=");
    const key = (eq < 0 ? part : part.slice(0, eq)).trim();
    if (!Object.hasOwn(defaults, key)) throw new Error(`unknown option "${key}": the options are ${Object.keys(defaults).join(", ")}`);
    const value = eq < 0 ? "" : part.slice(eq + 1).trim();
    if (value === "") throw new Error(`option "${key}" needs a value (${key}=…)`);
    options[key] = value;
  }
  return options as unknown as PluginOptions;
}

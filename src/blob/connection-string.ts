/**
 * One `name=value` part of an Azure Storage connection string, names
 * compared without case as Azure's SDKs do; undefined when absent. Read
 * where the SDK offers no accessor: the account key that signs SAS URLs,
 * and the settings production refuses.
 */
export function connectionStringPart(connectionString: string, name: string): string | undefined {
  for (const part of connectionString.split(";")) {
    const at = part.indexOf("=");
    if (at > 0 && part.slice(0, at).trim().toLowerCase() === name.toLowerCase()) return part.slice(at + 1).trim();
  }
  return undefined;
}

/**
 * Every value given under `name` (names compared without case): a string
 * may repeat a name, and what a client then uses is its own business, so a
 * check that refuses a value must look at all of them.
 */
export function connectionStringParts(connectionString: string, name: string): string[] {
  const values: string[] = [];
  for (const part of connectionString.split(";")) {
    const at = part.indexOf("=");
    if (at > 0 && part.slice(0, at).trim().toLowerCase() === name.toLowerCase()) values.push(part.slice(at + 1).trim());
  }
  return values;
}

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

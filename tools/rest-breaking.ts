// What buf breaking cannot see: it compares descriptors, not the values of
// their options, and the REST API and its OpenAPI document are made from
// options. A change to an existing RPC's google.api.http rule (its path,
// verb, body or response_body) or to its success status (created_when),
// and a field newly marked REQUIRED, break REST clients and clients that
// were generated from the proto as surely as a renamed field.
//
//   node --import tsx tools/rest-breaking.ts AGAINST.json CURRENT.json
//
// Reads two images written by `buf build -o <file>.json`; prints one line per
// break and exits 1 when there is any. tools/proto-breaking.sh runs it.
import fs from "node:fs";
import { pathToFileURL } from "node:url";

type Options = Record<string, unknown> | undefined;
interface Field {
  readonly name: string;
  readonly number: number;
  readonly options?: Options;
}
interface Message {
  readonly name: string;
  readonly field?: Field[];
  readonly nestedType?: Message[];
}
interface Method {
  readonly name: string;
  readonly inputType?: string;
  readonly options?: Options;
}
interface Service {
  readonly name: string;
  readonly method?: Method[];
}
interface FileDescriptor {
  readonly name: string;
  readonly package?: string;
  readonly messageType?: Message[];
  readonly service?: Service[];
}
/** A FileDescriptorSet as `buf build` writes it in JSON. */
export interface Image {
  readonly file: FileDescriptor[];
}

/** JSON with its object keys sorted: the same option reads the same whatever order it was written in. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (typeof value === "object" && value !== null) {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(value) ?? "undefined";
}

/** Our own files: the API's packages, not google's or gRPC's. */
const ours = (file: FileDescriptor) => file.package?.startsWith("entityversions.") === true;

function methods(image: Image): Map<string, Method> {
  const found = new Map<string, Method>();
  for (const file of image.file.filter(ours)) {
    for (const service of file.service ?? []) for (const method of service.method ?? []) found.set(`${file.package}.${service.name}.${method.name}`, method);
  }
  return found;
}

/** The fields of the messages RPCs take as requests (and of messages nested in them), by message and number. */
function requestFields(image: Image): Map<string, Field> {
  const inputs = new Set([...methods(image).values()].map((m) => m.inputType?.replace(/^\./, "")));
  const found = new Map<string, Field>();
  const visit = (prefix: string, message: Message, request: boolean) => {
    const name = `${prefix}.${message.name}`;
    const isRequest = request || inputs.has(name);
    if (isRequest) for (const field of message.field ?? []) found.set(`${name}#${field.number}`, { ...field, name: `${name}.${field.name}` });
    for (const nested of message.nestedType ?? []) visit(name, nested, isRequest);
  };
  for (const file of image.file.filter(ours)) for (const message of file.messageType ?? []) visit(file.package!, message, false);
  return found;
}

/** A google.api.http rule's own binding, and its additional bindings, each as canonical JSON. */
function bindings(rule: unknown): { primary: string; additional: Set<string> } {
  const { additionalBindings, additional_bindings, ...primary } = (rule ?? {}) as Record<string, unknown>;
  const extra = (additionalBindings ?? additional_bindings ?? []) as unknown[];
  return { primary: canonical(primary), additional: new Set(extra.map(canonical)) };
}

const required = (field: Field) => (field.options?.["[google.api.field_behavior]"] as string[] | undefined)?.includes("REQUIRED") === true;

/** The breaks of CURRENT against AGAINST that buf breaking does not report, one line each. */
export function restBreaks(against: Image, current: Image): string[] {
  const breaks: string[] = [];
  const now = methods(current);
  for (const [name, before] of methods(against)) {
    const after = now.get(name);
    if (after === undefined) continue; // a removed RPC: buf breaking says so
    // A binding added is compatible; the rule's own one changed, or one it had gone, is not.
    const was = bindings(before.options?.["[google.api.http]"]);
    const is = bindings(after.options?.["[google.api.http]"]);
    if (was.primary !== is.primary) breaks.push(`${name}: its google.api.http binding changed from ${was.primary} to ${is.primary}.`);
    for (const binding of was.additional) if (!is.additional.has(binding)) breaks.push(`${name}: its additional binding ${binding} is gone.`);
    const createdWas = canonical(before.options?.["[entityversions.v1.created_when]"]);
    const createdIs = canonical(after.options?.["[entityversions.v1.created_when]"]);
    if (createdWas !== createdIs) breaks.push(`${name}: its entityversions.v1.created_when option changed from ${createdWas} to ${createdIs}.`);
  }
  // An RPC's operationId in the OpenAPI document is its bare name while no
  // other service's RPC with a rule has it, its service's name and its own
  // after: a new RPC of the same name renames the existing operation in
  // every client generated from the document.
  const operationNames = (image: Image) => {
    const count = new Map<string, number>();
    for (const [name, method] of methods(image)) {
      if (method.options?.["[google.api.http]"] === undefined) continue;
      const bare = name.slice(name.lastIndexOf(".") + 1);
      count.set(bare, (count.get(bare) ?? 0) + 1);
    }
    return count;
  };
  const namedBefore = operationNames(against);
  for (const [bare, count] of operationNames(current)) {
    if (count > 1 && namedBefore.get(bare) === 1) {
      breaks.push(`${bare}: another service's RPC of this name renames the existing operation (operationId ${bare}) in every client generated from the OpenAPI document; name the new RPC otherwise.`);
    }
  }
  // A field of an existing request REQUIRED now that was not, or new and
  // REQUIRED: requests that leave it out are refused. A new RPC's request
  // has no clients yet.
  const fieldsBefore = requestFields(against);
  const messagesBefore = new Set([...fieldsBefore.keys()].map((key) => key.split("#")[0]));
  for (const [key, after] of requestFields(current)) {
    const before = fieldsBefore.get(key);
    if (required(after) && messagesBefore.has(key.split("#")[0]) && (before === undefined || !required(before))) {
      breaks.push(`${after.name}: ${before === undefined ? "a new field, REQUIRED" : "newly REQUIRED"}; requests that leave it out are now refused.`);
    }
  }
  return breaks;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [againstFile, currentFile] = process.argv.slice(2);
  if (againstFile === undefined || currentFile === undefined) {
    process.stderr.write("usage: rest-breaking AGAINST.json CURRENT.json\n");
    process.exit(2);
  }
  const read = (file: string) => JSON.parse(fs.readFileSync(file, "utf8")) as Image;
  const breaks = restBreaks(read(againstFile), read(currentFile));
  for (const line of breaks) process.stdout.write(`${line}\n`);
  process.exit(breaks.length === 0 ? 0 : 1);
}

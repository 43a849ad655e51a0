import { type DescExtension, type DescField, type DescMessage, type DescMethod, type DescService, type FileRegistry, getOption, hasOption, ScalarType } from "@bufbuild/protobuf";
import { catalog, isReason, type Reason } from "../../../src/errors/catalog.js";

// The options of proto/entityversions/v1/annotations.proto, read through
// the extensions of the request being generated (not gen/, which this run
// may be regenerating), so a changed option is seen at once.
const names = {
  serviceErrors: "entityversions.v1.service_errors",
  errors: "entityversions.v1.errors",
  createdWhen: "entityversions.v1.created_when",
  errorDetailOf: "entityversions.v1.error_detail_of",
} as const;

/** What the annotations say about the services being described. */
export interface ApiOptions {
  /** The catalog reasons an RPC can answer, declared on it and on its service. */
  declaredReasons(method: DescMethod): Reason[];
  /** The bool response field whose truth makes REST answer 201, if any. */
  createdWhen(method: DescMethod): string | undefined;
  /** The detail message each error reason carries, for reasons that carry one. */
  readonly details: ReadonlyMap<Reason, DescMessage>;
  /**
   * Whether a request must set the field: `(google.api.field_behavior) =
   * REQUIRED`, as AIP-203 marks it, which the RPC's checks answer
   * INVALID_ARGUMENT without (a contract test holds the two together).
   */
  required(field: DescField): boolean;
}

function checked(reasons: readonly string[], where: string): Reason[] {
  return reasons.map((reason) => {
    if (!isReason(reason)) {
      throw new Error(`${where}: "${reason}" is not an error reason of src/errors/catalog.ts (it has ${Object.keys(catalog).join(", ")})`);
    }
    return reason;
  });
}

function optionOf<T>(registry: FileRegistry, name: string): ((desc: DescService | DescMethod | DescMessage | DescField) => T | undefined) {
  const ext = registry.getExtension(name) as DescExtension | undefined;
  if (ext === undefined) return () => undefined;
  return (desc) => (hasOption(desc as never, ext) ? (getOption(desc as never, ext) as T) : undefined);
}

/** Reads the annotations from the registry of a generation request. */
export function readApiOptions(registry: FileRegistry): ApiOptions {
  const serviceErrors = optionOf<{ reasons: string[] }>(registry, names.serviceErrors);
  const errors = optionOf<{ reasons: string[] }>(registry, names.errors);
  const createdWhen = optionOf<string>(registry, names.createdWhen);
  const detailOf = optionOf<string>(registry, names.errorDetailOf);
  const fieldBehavior = optionOf<number[]>(registry, "google.api.field_behavior");
  const requiredBehavior = registry.getEnum("google.api.FieldBehavior")?.values.find((v) => v.name === "REQUIRED")?.number;

  const details = new Map<Reason, DescMessage>();
  for (const file of registry.files) {
    const messages: DescMessage[] = [];
    const collect = (m: DescMessage) => {
      messages.push(m);
      m.nestedMessages.forEach(collect);
    };
    file.messages.forEach(collect);
    for (const message of messages) {
      const reason = detailOf(message);
      if (reason === undefined || reason === "") continue;
      const [checkedReason] = checked([reason], message.typeName);
      const other = details.get(checkedReason!);
      if (other !== undefined) throw new Error(`${message.typeName} and ${other.typeName} are both the detail of ${reason}`);
      details.set(checkedReason!, message);
    }
  }

  return {
    declaredReasons(method) {
      const where = `${method.parent.typeName}.${method.name}`;
      return [
        ...checked(serviceErrors(method.parent)?.reasons ?? [], method.parent.typeName),
        ...checked(errors(method)?.reasons ?? [], where),
      ];
    },
    createdWhen(method) {
      const field = createdWhen(method);
      if (field === undefined || field === "") return undefined;
      const f = method.output.fields.find((x) => x.name === field);
      if (f === undefined || f.fieldKind !== "scalar" || f.scalar !== ScalarType.BOOL) {
        throw new Error(`${method.parent.typeName}.${method.name}: created_when "${field}" must name a bool field of ${method.output.typeName}`);
      }
      return field;
    },
    details,
    required: (field) => requiredBehavior !== undefined && (fieldBehavior(field) ?? []).includes(requiredBehavior),
  };
}

import { type DescMethod, getOption, hasOption, type Message, ScalarType } from "@bufbuild/protobuf";
import { created_when } from "../../gen/entityversions/v1/annotations_pb.js";

// Per method: the local name of its created_when field, or null.
const flags = new Map<DescMethod, string | null>();

function flagOf(method: DescMethod): string | null {
  let flag = flags.get(method);
  if (flag === undefined) {
    flag = null;
    if (hasOption(method, created_when)) {
      const name = getOption(method, created_when);
      const field = method.output.fields.find((f) => f.name === name);
      if (field === undefined || field.fieldKind !== "scalar" || field.scalar !== ScalarType.BOOL) {
        throw new Error(`${method.parent.typeName}.${method.name}: created_when "${name}" is not a bool field of ${method.output.typeName}`);
      }
      flag = field.localName;
    }
    flags.set(method, flag);
  }
  return flag;
}

/**
 * The HTTP status of a successful REST answer: 201 Created when the RPC's
 * (entityversions.v1.created_when) option names a response field that is
 * true (ConfirmUpload's `created`), else 200. The OpenAPI document reads
 * the same option, so the two cannot disagree.
 */
export function successStatus(method: DescMethod, response: Message): number {
  const flag = flagOf(method);
  return flag !== null && (response as unknown as Record<string, unknown>)[flag] === true ? 201 : 200;
}

import { type DescField, type DescMessage, type DescMethod, type DescService, getOption, hasOption } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";

/** An HTTP verb a google.api.http rule can bind. */
export type HttpVerb = "GET" | "PUT" | "POST" | "DELETE" | "PATCH";

/** A path variable: the route parameter that carries it and the field path it sets. */
export interface PathVariable {
  readonly param: string;
  readonly fieldPath: readonly DescField[];
}

/** One REST binding of an RPC, read from its google.api.http rule. */
export interface RestBinding {
  readonly method: DescMethod;
  readonly verb: HttpVerb;
  /** The rule's path template, as written in the proto. */
  readonly template: string;
  /** The same path in Fastify's syntax (`:p0` for variables). */
  readonly routePath: string;
  readonly variables: readonly PathVariable[];
  /** The request field the body fills: "*" for the whole message, "" for no body. */
  readonly body: DescField | "*" | undefined;
  /** The response field that is the body, or undefined for the whole message. */
  readonly responseBody: DescField | undefined;
}

/** A google.api.http rule this gateway cannot serve; thrown at start-up, never per request. */
export class HttpRuleError extends Error {
  override name = "HttpRuleError";
}

const literalSegment = /^[A-Za-z0-9._~-]+$/;
const variableSegment = /^\{([A-Za-z_][A-Za-z0-9_.]*)(?:=\*)?\}$/;

function fieldPath(message: DescMessage, path: string, where: string): DescField[] {
  const fields: DescField[] = [];
  let current: DescMessage | undefined = message;
  for (const name of path.split(".")) {
    const field: DescField | undefined = current?.fields.find((f) => f.name === name);
    if (field === undefined) throw new HttpRuleError(`${where}: ${message.typeName} has no field "${path}"`);
    fields.push(field);
    current = field.fieldKind === "message" ? field.message : undefined;
  }
  const last = fields[fields.length - 1]!;
  if (last.fieldKind !== "scalar") throw new HttpRuleError(`${where}: path variable "${path}" must name a scalar field`);
  return fields;
}

function binding(method: DescMethod, rule: HttpRule, where: string): RestBinding {
  const { pattern } = rule;
  if (pattern.case === undefined || pattern.case === "custom") {
    throw new HttpRuleError(`${where}: only get, put, post, delete and patch rules are supported`);
  }
  const verb = pattern.case.toUpperCase() as HttpVerb;
  const template = pattern.value;
  if (!template.startsWith("/")) throw new HttpRuleError(`${where}: path "${template}" must start with "/"`);
  const variables: PathVariable[] = [];
  const segments = template
    .slice(1)
    .split("/")
    .map((segment) => {
      if (literalSegment.test(segment)) return segment;
      const m = variableSegment.exec(segment);
      if (m === null) {
        throw new HttpRuleError(
          `${where}: path segment "${segment}" is not supported: use literals or single-segment {field} variables`,
        );
      }
      const param = `p${variables.length}`;
      variables.push({ param, fieldPath: fieldPath(method.input, m[1]!, where) });
      return `:${param}`;
    });
  let body: RestBinding["body"];
  if (rule.body === "*") body = "*";
  else if (rule.body !== "") {
    body = method.input.fields.find((f) => f.name === rule.body);
    if (body === undefined) throw new HttpRuleError(`${where}: body "${rule.body}" is not a field of ${method.input.typeName}`);
  }
  let responseBody: DescField | undefined;
  if (rule.responseBody !== "") {
    responseBody = method.output.fields.find((f) => f.name === rule.responseBody);
    if (responseBody === undefined || responseBody.fieldKind !== "message") {
      throw new HttpRuleError(`${where}: response_body "${rule.responseBody}" must be a message field of ${method.output.typeName}`);
    }
  }
  return { method, verb, template, routePath: `/${segments.join("/")}`, variables, body, responseBody };
}

/**
 * Reads the REST bindings of every unary RPC of the services from their
 * google.api.http rules (and additional_bindings). Done once at start-up:
 * the proto is the only place a REST path is written.
 */
export function restBindings(services: readonly DescService[]): RestBinding[] {
  const bindings: RestBinding[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (method.methodKind !== "unary" || !hasOption(method, http)) continue;
      const rule = getOption(method, http);
      const where = `${service.typeName}.${method.name}`;
      bindings.push(binding(method, rule, where));
      for (const extra of rule.additionalBindings) bindings.push(binding(method, extra, `${where} (additional binding)`));
    }
  }
  return bindings;
}

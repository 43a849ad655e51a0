import { type DescField, type DescMessage, type DescMethod, type DescService, getOption, hasOption } from "@bufbuild/protobuf";
import type { GenExtension } from "@bufbuild/protobuf/codegenv2";
import type { MethodOptions } from "@bufbuild/protobuf/wkt";
import type { HttpRule } from "../../gen/google/api/http_pb.js";

/**
 * The google.api.http extension. Passed in rather than imported, so that
 * these rules also run where gen/ is not there to import: the OpenAPI
 * generator reads the same rules from the descriptors buf hands it.
 */
export type HttpRuleOption = GenExtension<MethodOptions, HttpRule>;

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
  /** The same path in Fastify's syntax (`:p0` for variables, `::` for a custom method's literal colon, `:p0(^.+)` for a variable before it). */
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
/** A custom method's verb (AIP-136): `:verb` at the end of the template. */
const customVerb = /:([A-Za-z][A-Za-z0-9_-]*)$/;

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
  // A custom method (AIP-136) ends in `:verb`, as in `/things/{id}/events:watch`
  // or `/things/{id}:undelete`; Fastify takes a literal colon written as `::`.
  const verbMatch = customVerb.exec(template.slice(template.lastIndexOf("/")));
  const path = verbMatch === null ? template : template.slice(0, -verbMatch[0].length);
  const variables: PathVariable[] = [];
  const segments = path.slice(1).split("/");
  const routeSegments = segments.map((segment, i) => {
    if (literalSegment.test(segment)) return segment;
    const m = variableSegment.exec(segment);
    if (m === null) {
      throw new HttpRuleError(`${where}: path segment "${segment}" is not supported: use literals or single-segment {field} variables`);
    }
    const param = `p${variables.length}`;
    variables.push({ param, fieldPath: fieldPath(method.input, m[1]!, where) });
    // A variable the verb follows is one with a pattern, which ends where
    // the last ":verb" begins (the router's plain variables end only at "/"),
    // as grpc-gateway splits the verb off the last segment.
    return verbMatch !== null && i === segments.length - 1 ? `:${param}(^.+)` : `:${param}`;
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
  const routePath = `/${routeSegments.join("/")}${verbMatch === null ? "" : `::${verbMatch[1]}`}`;
  return { method, verb, template, routePath, variables, body, responseBody };
}

/**
 * The REST bindings of one RPC, of any kind, from its google.api.http rule
 * and additional_bindings; none when it has no rule. Throws HttpRuleError
 * for a rule the gateway cannot serve.
 */
export function methodBindings(method: DescMethod, httpRule: HttpRuleOption): RestBinding[] {
  if (!hasOption(method, httpRule)) return [];
  const rule = getOption(method, httpRule);
  const where = `${method.parent.typeName}.${method.name}`;
  return [binding(method, rule, where), ...rule.additionalBindings.map((extra) => binding(method, extra, `${where} (additional binding)`))];
}

/**
 * Reads the REST bindings of every RPC of the services that REST can carry
 * (unary ones, and server-streaming ones as newline-delimited JSON) from
 * their google.api.http rules (and additional_bindings). Done once at
 * start-up: the proto is the only place a REST path is written.
 */
export function restBindings(services: readonly DescService[], httpRule: HttpRuleOption): RestBinding[] {
  return services.flatMap((service) =>
    service.methods.filter((m) => m.methodKind === "unary" || m.methodKind === "server_streaming").flatMap((m) => methodBindings(m, httpRule)),
  );
}

/**
 * Well-known message types a query parameter may set, as grpc-gateway
 * reads them: each one's JSON is a single string or scalar (an RFC 3339
 * time, "1.5s", comma-separated paths, a wrapped scalar), so it has one
 * text form. Their own fields (`since.seconds`) are not parameters.
 */
export const queryWellKnownTypes: ReadonlySet<string> = new Set([
  "google.protobuf.Timestamp",
  "google.protobuf.Duration",
  "google.protobuf.FieldMask",
  "google.protobuf.DoubleValue",
  "google.protobuf.FloatValue",
  "google.protobuf.Int64Value",
  "google.protobuf.UInt64Value",
  "google.protobuf.Int32Value",
  "google.protobuf.UInt32Value",
  "google.protobuf.BoolValue",
  "google.protobuf.StringValue",
  "google.protobuf.BytesValue",
]);

/**
 * The request field a query parameter sets (AIP-127, as grpc-gateway
 * reads it): a scalar, enum or repeated scalar or enum field, or a
 * well-known type with a one-string JSON form (queryWellKnownTypes),
 * reached through message fields by a dotted path, each part by its proto
 * or JSON name; undefined when the key names no such field. Fields a path
 * variable sets are not excluded here: the caller checks that.
 */
export function queryFieldPath(binding: RestBinding, key: string): DescField[] | undefined {
  const path: DescField[] = [];
  let message: DescMessage | undefined = binding.method.input;
  for (const name of key.split(".")) {
    // Inside a well-known type there are no parameters: its JSON is not its fields.
    const field: DescField | undefined = message?.typeName.startsWith("google.protobuf.") === false ? message.fields.find((f) => f.name === name || f.jsonName === name) : undefined;
    if (field === undefined) return undefined;
    path.push(field);
    message = field.fieldKind === "message" ? field.message : undefined;
  }
  const last = path[path.length - 1]!;
  switch (last.fieldKind) {
    case "scalar":
    case "enum":
      return path;
    case "list":
      return last.listKind === "message" ? undefined : path;
    case "message":
      return queryWellKnownTypes.has(last.message.typeName) ? path : undefined;
    default:
      return undefined;
  }
}

/** Whether two field paths overlap: one is the other or lies inside it. */
export function overlaps(a: readonly DescField[], b: readonly DescField[]): boolean {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return false;
  return true;
}

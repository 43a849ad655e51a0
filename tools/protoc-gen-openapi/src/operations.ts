import type { DescField, DescMessage } from "@bufbuild/protobuf";
import type { Reason } from "../../../src/errors/catalog.js";
import { announcedBodyReasons, bodyReasons, everyRouteReasons, readsBody, unaryReasons } from "../../../src/rest/gateway-errors.js";
import { queryFieldPath, type RestBinding } from "../../../src/rest/http-rules.js";
import type { ApiOptions } from "./api-options.js";
import { describe, firstSentence } from "./comments.js";
import type { ErrorResponses } from "./error-responses.js";
import { queryValueSchema, type SchemaSet } from "./json-schema.js";
import type { Operation, Parameter, Response, Schema } from "./openapi.js";

/** The name of the bearer security scheme every authenticated operation uses. */
export const bearerScheme = "bearer";

/** The OpenAPI path of a rule's template: variables lose their `=*`. */
export function openApiPath(binding: RestBinding): string {
  return binding.template.replace(/\{([^}=]+)=\*\}/g, "{$1}");
}

/** The message a binding's answers carry: the response_body field's, or the response. */
export function answerMessage(binding: RestBinding): DescMessage {
  return binding.responseBody?.message ?? binding.method.output;
}

/** The top-level request fields a body "*" carries: all but those the path sets whole. */
export function bodyFields(binding: RestBinding): DescField[] {
  const fromPath = new Set(binding.variables.filter((v) => v.fieldPath.length === 1).map((v) => v.fieldPath[0]!.name));
  return binding.method.input.fields.filter((f) => !fromPath.has(f.name));
}

/** The message a binding's request body is (or holds, for a repeated or map field), if any. */
export function requestMessage(binding: RestBinding): DescMessage | undefined {
  return binding.body === "*" ? binding.method.input : binding.body?.message;
}

/**
 * The query parameters of a binding (AIP-127): every scalar, enum or
 * repeated scalar or enum field the path and body do not set, nested ones
 * by dotted path, and the well-known types written as one string
 * (Timestamp, Duration, FieldMask, wrappers): each one the gateway itself
 * accepts (queryFieldPath). A rule with body "*" takes none. Well-known
 * types are not walked into: their JSON is not their fields. A parameter
 * is required when its field and every message field above it are marked
 * REQUIRED: a REQUIRED field inside an optional message is required only
 * when that message is given (AIP-203).
 */
function queryParameters(binding: RestBinding, required: (field: DescField) => boolean): Parameter[] {
  if (binding.body === "*") return [];
  const fromPath = new Set(binding.variables.map((v) => v.fieldPath.map((f) => f.name).join(".")));
  const parameters: Parameter[] = [];
  const walk = (message: DescMessage, prefix: string, seen: ReadonlySet<string>, inRequired: boolean) => {
    for (const field of message.fields) {
      const key = `${prefix}${field.name}`;
      if (fromPath.has(key) || (prefix === "" && binding.body !== undefined && field === binding.body)) continue;
      if (field.fieldKind === "message" && !field.message.typeName.startsWith("google.protobuf.")) {
        const sub = field.message;
        if (!seen.has(sub.typeName)) walk(sub, `${key}.`, new Set([...seen, sub.typeName]), inRequired && required(field));
        continue;
      }
      if (queryFieldPath(binding, key) === undefined) continue;
      const description = describe(field);
      parameters.push({
        name: key,
        in: "query",
        ...(inRequired && required(field) ? { required: true } : {}),
        ...(description === undefined ? {} : { description }),
        schema: queryValueSchema(field),
        ...(field.fieldKind === "list" ? { style: "form", explode: true } : {}),
      });
    }
  };
  walk(binding.method.input, "", new Set([binding.method.input.typeName]), true);
  return parameters;
}

function pathParameters(binding: RestBinding, schemas: SchemaSet): Parameter[] {
  return binding.variables.map((v) => {
    const field = v.fieldPath[v.fieldPath.length - 1]!;
    const { description, ...schema } = schemas.field(field, "request");
    return {
      name: v.fieldPath.map((f) => f.name).join("."),
      in: "path",
      required: true,
      ...(description === undefined ? {} : { description: description as string }),
      schema,
    };
  });
}

/** What an operation is made from. */
export interface OperationContext {
  readonly schemas: SchemaSet;
  readonly errors: ErrorResponses;
  readonly options: ApiOptions;
  readonly operationId: string;
  readonly tag: string;
}

/** The reasons an operation can answer: every route's, body reading's, a unary call's, and the RPC's declared ones. */
export function operationReasons(binding: RestBinding, options: ApiOptions): Reason[] {
  return [
    ...everyRouteReasons,
    ...(readsBody(binding.verb) ? bodyReasons : announcedBodyReasons),
    ...(binding.method.methodKind === "unary" ? unaryReasons : []),
    ...options.declaredReasons(binding.method),
  ];
}

function successResponses(binding: RestBinding, ctx: OperationContext): Record<string, Response> {
  const { method } = binding;
  const answer = ctx.schemas.message(answerMessage(binding), "answer");
  if (method.methodKind === "server_streaming") {
    const line: Schema = {
      oneOf: [
        { type: "object", required: ["result"], properties: { result: answer }, description: "A message of the stream." },
        {
          type: "object",
          required: ["error"],
          properties: { error: { anyOf: Object.values(ctx.errors.responses(operationReasons(binding, ctx.options))).map((r) => r.content!["application/json"]!.schema) } },
          description: "The error that ended the stream: always the last line.",
        },
      ],
    };
    return {
      "200": {
        description:
          "A stream of newline-delimited JSON (NDJSON): one object per line, `{\"result\": …}` for each message, and `{\"error\": …}` as the last line if " +
          "the stream fails once begun; `x-item-schema` is each line's schema (OpenAPI 3.2's `itemSchema`). Read it line by line as it comes: a stream " +
          "may never end. An error before the first message is an ordinary error answer.",
        // The body as a whole is text: a generator that took one line's
        // schema for it would parse the whole stream as one JSON value.
        content: { "application/x-ndjson": { schema: { type: "string", description: "Newline-delimited JSON objects, one per line (see x-item-schema)." }, "x-item-schema": line } },
      },
    };
  }
  const created = ctx.options.createdWhen(method);
  if (created === undefined) return { "200": { description: "OK.", content: { "application/json": { schema: answer } } } };
  // With response_body the flag is not in the body, so only the status
  // tells. A one-value enum, not `const`: OpenAPI 3.0 generators read it too.
  const flagged = (value: boolean): Schema =>
    binding.responseBody === undefined ? { allOf: [answer, { type: "object", properties: { [created]: { type: "boolean", enum: [value] } } }] } : answer;
  return {
    "200": { description: `OK: \`${created}\` is false.`, content: { "application/json": { schema: flagged(false) } } },
    "201": { description: `Created: \`${created}\` is true.`, content: { "application/json": { schema: flagged(true) } } },
  };
}

function requestBody(binding: RestBinding, schemas: SchemaSet, required: (field: DescField) => boolean): Operation["requestBody"] {
  if (binding.body === undefined) return undefined;
  let schema: Schema;
  // A body is required when a field it carries is: without one, the call is refused.
  let needed: boolean;
  if (binding.body !== "*") {
    schema = schemas.field(binding.body, "request");
    needed = required(binding.body);
  } else {
    const fields = bodyFields(binding);
    const input = binding.method.input;
    schema =
      fields.length === input.fields.length
        ? schemas.message(input, "request")
        : schemas.reuse(`${input.typeName}-body`, () => schemas.object(input, "request", fields, input.fields.filter((f) => !fields.includes(f))));
    needed = fields.some(required);
  }
  return { ...(needed ? { required: true } : {}), content: { "application/json": { schema } } };
}

/** The OpenAPI operation of one REST binding. */
export function operation(binding: RestBinding, ctx: OperationContext): Operation {
  const { method } = binding;
  const description = describe(method);
  const summary = firstSentence(description);
  const reasons = operationReasons(binding, ctx.options);
  const required = (field: DescField) => ctx.options.required(field);
  const parameters = [...pathParameters(binding, ctx.schemas), ...queryParameters(binding, required)];
  const body = requestBody(binding, ctx.schemas, required);
  return {
    operationId: ctx.operationId,
    ...(summary === undefined ? {} : { summary }),
    ...(description === undefined ? {} : { description }),
    tags: [ctx.tag],
    security: reasons.includes("AUTH_REQUIRED") ? [{ [bearerScheme]: [] }] : [],
    ...(parameters.length === 0 ? {} : { parameters }),
    ...(body === undefined ? {} : { requestBody: body }),
    responses: { ...successResponses(binding, ctx), ...ctx.errors.responses(reasons, binding.method.methodKind === "server_streaming") },
  };
}

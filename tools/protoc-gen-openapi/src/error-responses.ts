import { STATUS_CODES } from "node:http";
import type { DescMessage } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { catalog, type Reason } from "../../../src/errors/catalog.js";
import { describe } from "./comments.js";
import type { Header, Response, Schema } from "./openapi.js";
import type { SchemaSet } from "./json-schema.js";

/** Catalog order: the order of the README's error table. */
const reasonOrder = new Map(Object.keys(catalog).map((reason, i) => [reason, i]));

/** Reasons in catalog order, each once. */
export function sortReasons(reasons: Iterable<Reason>): Reason[] {
  return [...new Set(reasons)].sort((a, b) => reasonOrder.get(a)! - reasonOrder.get(b)!);
}

/**
 * A message template with its parameters shown as {name}: the catalog's
 * own words, so a reader learns what each code says. `lastEventId`, where
 * a stream resumes, is set only for a stream: elsewhere the catalog's
 * message for a unary call (what to retry) is the one it answers.
 */
function messageTemplate(reason: Reason, stream: boolean): string {
  const placeholders = new Proxy({}, { get: (_target, key) => (key === "lastEventId" && !stream ? undefined : `{${String(key)}}`) });
  // Markdown would take <token> for HTML and drop it.
  return (catalog[reason].message as (p: unknown) => string)(placeholders).replace(/[<*]/g, (c) => `\\${c}`);
}

/**
 * The REST error bodies (src/rest/rest-error.ts) as schemas and responses:
 * `{error, code}`, plus at the top level the fields of the detail message a
 * code carries (every field present, null when the detail leaves it
 * unset), with the catalog's HTTP status, `WWW-Authenticate` on 401s and
 * `Retry-After` where the catalog says retrying helps.
 */
export class ErrorResponses {
  readonly #schemas: SchemaSet;
  readonly #details: ReadonlyMap<Reason, DescMessage>;
  readonly #error: Schema;

  constructor(schemas: SchemaSet, details: ReadonlyMap<Reason, DescMessage>) {
    this.#schemas = schemas;
    this.#details = details;
    this.#error = schemas.add("Error", {
      type: "object",
      description:
        "An error: what went wrong and what to do, for people, and a stable code for programs. " +
        "Codes that carry a detail add its fields at the top level (see the `Error.` schemas).",
      required: ["error", "code"],
      properties: {
        error: { type: "string", description: "What went wrong and what to do about it. Written for people; may change." },
        code: { type: "string", description: "The error code: stable, never renamed. Each operation lists the codes it can answer." },
      },
    });
  }

  #detailSchema(reason: Reason, detail: DescMessage): Schema {
    const name = `Error.${reason}`;
    const properties: Record<string, Schema> = {
      error: { type: "string" },
      // A one-value enum, not `const`: OpenAPI 3.0 generators read it too.
      code: { type: "string", enum: [reason] },
    };
    for (const field of detail.fields) {
      const value = this.#schemas.field(field, "detail");
      const { description, ...rest } = value;
      // null as a one-value enum, not `type: "null"`: OpenAPI 3.0 loaders
      // (kin-openapi, under oapi-codegen) refuse that type, and read this.
      properties[field.name] = { ...(description === undefined ? {} : { description }), anyOf: [rest, { enum: [null] }] };
    }
    return this.#schemas.add(name, {
      type: "object",
      ...(describe(detail) === undefined ? {} : { description: describe(detail) }),
      required: ["error", "code", ...detail.fields.map((f) => f.name)],
      properties,
    });
  }

  readonly #detailRefs = new Map<Reason, Schema>();

  /** The body schema of one status: the codes as an enum, and the codes with details as their own shapes. */
  schema(reasons: readonly Reason[]): Schema {
    const plain = reasons.filter((r) => !this.#details.has(r));
    const detailed = reasons.filter((r) => this.#details.has(r)).map((r) => {
      let ref = this.#detailRefs.get(r);
      if (ref === undefined) this.#detailRefs.set(r, (ref = this.#detailSchema(r, this.#details.get(r)!)));
      return ref;
    });
    const plainSchema: Schema = { allOf: [this.#error, { type: "object", properties: { code: { enum: plain } } }] };
    if (detailed.length === 0) return plainSchema;
    if (plain.length === 0 && detailed.length === 1) return detailed[0]!;
    return { oneOf: [...(plain.length === 0 ? [] : [plainSchema]), ...detailed] };
  }

  /** The error responses of an operation that can answer these reasons, by status; `stream`: a server stream's. */
  responses(reasons: readonly Reason[], stream = false): Record<string, Response> {
    const byStatus = new Map<number, Reason[]>();
    for (const reason of sortReasons(reasons)) {
      const status = catalog[reason].httpStatus;
      byStatus.set(status, [...(byStatus.get(status) ?? []), reason]);
    }
    const responses: Record<string, Response> = {};
    for (const status of [...byStatus.keys()].sort((a, b) => a - b)) {
      const codes = byStatus.get(status)!;
      const headers: Record<string, Header> = {};
      // The same rules as renderRestError: RFC 6750 for 401s, RetryInfo as Retry-After.
      if (codes.every((r) => catalog[r].code === Code.Unauthenticated)) {
        headers["WWW-Authenticate"] = { description: "The scheme to authenticate with: `Bearer`.", required: true, schema: { type: "string" } };
      }
      const retryable = codes.filter((r) => (catalog[r] as { retryable?: boolean }).retryable === true);
      if (retryable.length > 0) {
        headers["Retry-After"] = {
          description: `Seconds to wait before retrying${retryable.length < codes.length ? ` (${retryable.map((r) => `\`${r}\``).join(", ")})` : ""}.`,
          required: retryable.length === codes.length,
          schema: { type: "integer", minimum: 1 },
        };
      }
      responses[String(status)] = {
        description: `${STATUS_CODES[status] ?? "Error"}.\n\n${codes.map((r) => `- \`${r}\`: ${messageTemplate(r, stream)}`).join("\n")}`,
        ...(Object.keys(headers).length === 0 ? {} : { headers }),
        content: { "application/json": { schema: this.schema(codes) } },
      };
    }
    return responses;
  }
}

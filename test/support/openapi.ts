// Holds REST answers to the OpenAPI document: each answer's status must be
// documented for its operation, and its body must match that status's
// schema, checked by Ajv (JSON Schema 2020-12), which shares no code with
// the generator. Records which (operation, status, code) each answer was.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The generated document of the real API. */
export const documentPath = path.join(root, "gen/openapi/entity-versions.openapi.json");

type Json = { [key: string]: any };

/** An operation of the document and how to recognise a request for it. */
interface Route {
  readonly method: string;
  readonly template: string;
  readonly operationId: string;
  readonly operation: Json;
  readonly pattern: RegExp;
  readonly literals: number;
}

/** One answer to hold to the document. */
export interface Answer {
  readonly method: string;
  /** The request path, with or without a query. */
  readonly path: string;
  readonly status: number;
  readonly headers: Headers;
  /**
   * The parsed JSON body, or the text when it was not JSON; for a stream
   * (application/x-ndjson), its lines so far, each parsed.
   */
  readonly body: unknown;
}

const pointer = (...tokens: string[]) => tokens.map((t) => encodeURIComponent(t.replace(/~/g, "~0").replace(/\//g, "~1"))).join("/");

/**
 * A document and the schemas of its answers. For the tests, every object
 * schema among the components is closed (additionalProperties: false): the
 * document leaves them open so that clients survive fields added later,
 * but an answer carrying a field the document does not name is a bug here.
 */
export class OpenApiDocument {
  readonly document: Json;
  readonly #routes: Route[] = [];
  readonly #ajv: Ajv2020;
  readonly #validators = new Map<string, ValidateFunction>();

  constructor(document: Json) {
    this.document = document;
    const closed = structuredClone(document);
    for (const schema of Object.values(closed.components.schemas as Record<string, Json>)) {
      if (schema["type"] === "object" && schema["properties"] !== undefined && Object.keys(schema["properties"]).length > 0) schema["additionalProperties"] = false;
    }
    this.#ajv = new Ajv2020({ strict: true, allErrors: true });
    addFormats.default(this.#ajv);
    // Checked by the schemas' own bounds and patterns; named for readers.
    for (const format of ["int32", "int64", "float", "double"]) this.#ajv.addFormat(format, true);
    // The document is added whole, so that its own "#/components/…" references resolve.
    this.#ajv.addVocabulary(["openapi", "info", "servers", "tags", "paths", "components"]);
    this.#ajv.addSchema(closed, "urn:entity-versions:openapi");
    // Requests are held to the document as generated: its request schemas say themselves which keys they take.
    this.#ajv.addSchema(structuredClone(document), "urn:entity-versions:openapi-as-generated");
    for (const [template, methods] of Object.entries(document.paths as Record<string, Record<string, Json>>)) {
      const source = template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+");
      for (const [method, operation] of Object.entries(methods)) {
        this.#routes.push({
          method: method.toUpperCase(),
          template,
          operationId: operation.operationId,
          operation,
          pattern: new RegExp(`^${source}$`),
          literals: template.split("/").filter((s) => !s.startsWith("{")).length,
        });
      }
    }
    // As the router does: a literal segment wins over a variable.
    this.#routes.sort((a, b) => b.literals - a.literals);
  }

  /** Reads the generated document of the real API. */
  static load(file = documentPath): OpenApiDocument {
    return new OpenApiDocument(JSON.parse(fs.readFileSync(file, "utf8")) as Json);
  }

  /** The operation a request reaches, if the document has one. */
  route(method: string, requestPath: string): Route | undefined {
    const pathname = new URL(requestPath, "http://x").pathname;
    return this.#routes.find((r) => r.method === method.toUpperCase() && r.pattern.test(pathname));
  }

  #validator(route: Route, status: string, mediaType: string): ValidateFunction {
    const key = `${route.method} ${route.template} ${status} ${mediaType}`;
    let validate = this.#validators.get(key);
    if (validate === undefined) {
      // A stream's lines each match its item schema.
      const schema = mediaType === "application/x-ndjson" ? "x-item-schema" : "schema";
      const ref = `urn:entity-versions:openapi#/${pointer("paths", route.template, route.method.toLowerCase(), "responses", status, "content", mediaType, schema)}`;
      validate = this.#ajv.compile({ $ref: ref });
      this.#validators.set(key, validate);
    }
    return validate;
  }

  /**
   * The ways an answer breaks the document: an undocumented status, a
   * content type or header the status does not have, a body its schema
   * refuses. Empty when it holds, or when the document has no operation
   * for the request (health checks, unknown routes). Adds
   * `operationId status code` (code empty for successes) to `seen`.
   */
  problems(answer: Answer, seen?: Set<string>): string[] {
    const route = this.route(answer.method, answer.path);
    if (route === undefined) return [];
    const status = String(answer.status);
    const code = typeof answer.body === "object" && answer.body !== null && typeof (answer.body as Json)["code"] === "string" ? (answer.body as Json)["code"] : "";
    seen?.add(`${route.operationId} ${status} ${answer.status < 400 ? "" : code}`);
    const where = `${route.operationId} (${route.method} ${route.template}) answered ${status}${code === "" ? "" : ` ${code}`}`;
    const documented = route.operation.responses[status] as Json | undefined;
    if (documented === undefined) return [`${where}: the document has no ${status} for it (it has ${Object.keys(route.operation.responses).join(", ")})`];
    const problems: string[] = [];
    for (const [name, header] of Object.entries((documented["headers"] ?? {}) as Record<string, Json>)) {
      const value = answer.headers.get(name);
      if (value === null && header["required"] === true) problems.push(`${where}: header ${name} is missing`);
      if (value !== null && header["schema"]?.type === "integer" && !/^[0-9]+$/.test(value)) problems.push(`${where}: header ${name} is ${value}, not an integer`);
    }
    const mediaType = (answer.headers.get("content-type") ?? "").split(";")[0]!.trim();
    const content = documented["content"] as Record<string, unknown> | undefined;
    if (content === undefined) return problems;
    if (content[mediaType] === undefined) return [...problems, `${where}: content type ${mediaType} is not documented (${Object.keys(content).join(", ")})`];
    const validate = this.#validator(route, status, mediaType);
    // A stream's schema is that of each of its lines.
    const bodies = mediaType === "application/x-ndjson" ? (Array.isArray(answer.body) ? answer.body : [answer.body]) : [answer.body];
    for (const body of bodies) {
      if (!validate(body)) {
        problems.push(`${where}: the body does not match the document: ${this.#ajv.errorsText(validate.errors, { separator: "; " })}\n  body: ${JSON.stringify(body).slice(0, 600)}`);
      }
    }
    return problems;
  }

  /** Why the document refuses a JSON request body for this operation; empty when it takes it. */
  requestBodyProblems(method: string, requestPath: string, body: unknown): string[] {
    const route = this.route(method, requestPath);
    if (route === undefined) return [`no operation for ${method} ${requestPath}`];
    const ref = `urn:entity-versions:openapi-as-generated#/${pointer("paths", route.template, route.method.toLowerCase(), "requestBody", "content", "application/json", "schema")}`;
    const validate = this.#ajv.getSchema(ref) ?? this.#ajv.compile({ $ref: ref });
    return validate(body) ? [] : [this.#ajv.errorsText(validate.errors, { separator: "; " })];
  }

  /** Throws when an answer breaks the document. */
  check(answer: Answer, seen?: Set<string>): void {
    const problems = this.problems(answer, seen);
    if (problems.length > 0) throw new Error(`REST answer does not match gen/openapi: ${problems.join("\n")}`);
  }
}

let shared: OpenApiDocument | undefined;

/** The real API's document, loaded once for every suite of the test process. */
export function apiDocument(): OpenApiDocument {
  shared ??= OpenApiDocument.load();
  return shared;
}

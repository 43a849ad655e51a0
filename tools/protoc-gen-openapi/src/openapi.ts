// The parts of OpenAPI 3.1 this generator writes. Schemas are JSON Schema
// 2020-12 objects, kept loose: they are data to serialize, not to inspect.

/** A JSON Schema (2020-12) object. */
export type Schema = { [keyword: string]: unknown };

/** A parameter in the path or the query. */
export interface Parameter {
  name: string;
  in: "path" | "query";
  description?: string;
  required?: boolean;
  schema: Schema;
  style?: "form";
  explode?: boolean;
}

/** A response header. */
export interface Header {
  description: string;
  required?: boolean;
  schema: Schema;
}

/**
 * A body of one media type. `x-item-schema`: for a sequential media type
 * (NDJSON), the schema of each item, as OpenAPI 3.2's `itemSchema` says it,
 * where `schema` describes the body as a whole.
 */
export interface MediaType {
  schema: Schema;
  "x-item-schema"?: Schema;
}

/** One answer of an operation, for one status. */
export interface Response {
  description: string;
  headers?: Record<string, Header>;
  content?: Record<string, MediaType>;
}

/** One HTTP method on one path. */
export interface Operation {
  operationId: string;
  summary?: string;
  description?: string;
  tags: string[];
  security: Array<Record<string, string[]>>;
  parameters?: Parameter[];
  requestBody?: { description?: string; required?: boolean; content: Record<string, { schema: Schema }> };
  responses: Record<string, Response>;
}

/** The document. */
export interface Document {
  openapi: "3.1.0";
  info: { title: string; version: string; description: string };
  servers: Array<{ url: string; description: string }>;
  tags: Array<{ name: string; description?: string }>;
  paths: Record<string, Record<string, Operation>>;
  components: {
    schemas: Record<string, Schema>;
    securitySchemes: Record<string, Schema>;
  };
}

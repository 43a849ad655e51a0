import type { DescService, FileRegistry } from "@bufbuild/protobuf";
import { type HttpRuleOption, methodBindings, type RestBinding } from "../../../src/rest/http-rules.js";
import { readApiOptions } from "./api-options.js";
import { describe } from "./comments.js";
import { ErrorResponses } from "./error-responses.js";
import { type Form, SchemaSet } from "./json-schema.js";
import type { Document, Operation } from "./openapi.js";
import { answerMessage, bearerScheme, openApiPath, operation, operationReasons, requestMessage } from "./operations.js";
import type { PluginOptions } from "./parameter.js";

const conventions = `Generated from the protobuf definition and its \`google.api.http\` rules, as the service's REST gateway serves them.

- Field names are the proto's (snake_case); requests may also use lowerCamelCase (not both for one field), which \`dependentSchemas\` holds to the same schema. Unknown request fields are refused. Those a request cannot go without (\`google.api.field_behavior\` REQUIRED) are \`required\`, or, when they have a lowerCamelCase name, required in either spelling (the schema's \`not\`).
- Answers always carry the fields that have no presence of their own, zero values included (\`false\`, \`0\`, \`""\`, \`[]\`, \`{}\`): those are \`required\`. \`optional\` and message fields are left out when unset.
- 64-bit integers are JSON numbers up to 2^53 - 1 and decimal strings beyond; requests may send either, but a JSON number beyond 2^53 - 1 is refused (it would be read rounded), there and in \`google.protobuf.Struct\` values: send such a value as a string.
- Timestamps are RFC 3339 strings in UTC, enums their value names.
- Errors are \`{"error": "…", "code": "…"}\` with the status of their code; each operation lists the codes it can answer.`;

/**
 * The REST bindings of the services' RPCs that REST can carry: unary ones,
 * and server-streaming ones as newline-delimited JSON. Client and
 * bidirectional streams have no REST form and are left out.
 */
function bindingsOf(services: readonly DescService[], httpRule: HttpRuleOption): Array<{ binding: RestBinding; index: number }> {
  return services.flatMap((service) =>
    service.methods
      .filter((m) => m.methodKind === "unary" || m.methodKind === "server_streaming")
      .flatMap((m) => methodBindings(m, httpRule).map((binding, index) => ({ binding, index }))),
  );
}

/**
 * The OpenAPI 3.1 document of the services' REST API, or undefined when no
 * RPC has a google.api.http rule. Everything in it comes from the
 * descriptors, their comments and options, the gateway's own binding rules
 * (src/rest/http-rules.ts) and the error catalog.
 */
export function openApiDocument(services: readonly DescService[], registry: FileRegistry, pluginOptions: PluginOptions): Document | undefined {
  const httpRule = registry.getExtension("google.api.http") as HttpRuleOption | undefined;
  if (httpRule === undefined) return undefined;
  const options = readApiOptions(registry);
  const bound = bindingsOf(services, httpRule);
  if (bound.length === 0) return undefined;

  const roots: Array<{ message: (typeof bound)[number]["binding"]["method"]["input"]; form: Form }> = [];
  for (const { binding } of bound) {
    roots.push({ message: answerMessage(binding), form: "answer" });
    const request = requestMessage(binding);
    if (request !== undefined) roots.push({ message: request, form: "request" });
    for (const reason of operationReasons(binding, options)) {
      const detail = options.details.get(reason);
      if (detail !== undefined) roots.push({ message: detail, form: "detail" });
    }
  }
  const schemas = new SchemaSet(roots, (field) => options.required(field));
  const errors = new ErrorResponses(schemas, options.details);

  const names = new Map<string, number>();
  for (const { binding, index } of bound) if (index === 0) names.set(binding.method.name, (names.get(binding.method.name) ?? 0) + 1);
  const paths: Record<string, Record<string, Operation>> = {};
  for (const { binding, index } of bound) {
    const { method } = binding;
    const base = names.get(method.name)! > 1 ? `${method.parent.name}_${method.name}` : method.name;
    const operationId = index === 0 ? base : `${base}_${index + 1}`;
    const path = openApiPath(binding);
    const verb = binding.verb.toLowerCase();
    paths[path] ??= {};
    if (paths[path][verb] !== undefined) {
      throw new Error(`${method.parent.typeName}.${method.name}: ${binding.verb} ${path} is bound twice (also by ${paths[path][verb].operationId})`);
    }
    paths[path][verb] = operation(binding, { schemas, errors, options, operationId, tag: method.parent.name });
  }

  const tagged = services.filter((s) => bound.some(({ binding }) => binding.method.parent === s));
  return {
    openapi: "3.1.0",
    info: { title: pluginOptions.title, version: pluginOptions.version, description: conventions },
    servers: [{ url: "/", description: "The service that serves this document." }],
    tags: tagged.map((s) => ({ name: s.name, ...(describe(s) === undefined ? {} : { description: describe(s) }) })),
    paths,
    components: {
      schemas: schemas.components(),
      securitySchemes: {
        [bearerScheme]: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "A JWT in `Authorization: Bearer <token>`." },
      },
    },
  };
}

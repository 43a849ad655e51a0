import { existsSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";

/** The generated document's file name, without extension (buf.gen.yaml's `file` option). */
const documentName = "entity-versions.openapi";

/**
 * Where `npm run generate` writes the document: gen/openapi/ of the
 * checkout. From src/rest/ that is two levels up; compiled, this module is
 * in dist/src/rest/, three levels up.
 */
function documentDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const candidates = [path.resolve(here, "../../gen/openapi"), path.resolve(here, "../../../gen/openapi")];
  const found = candidates.find((dir) => existsSync(path.join(dir, `${documentName}.json`)));
  if (found === undefined) throw new Error(`${documentName}.json is not in ${candidates.join(" or ")}: run npm run generate`);
  return found;
}

// The reference page's own script: the page allows no inline script.
const initScript = `window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#docs",
    deepLinking: true,
    validatorUrl: null,
    defaultModelsExpandDepth: 0,
  });
});
`;

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Entity Versions API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
<div id="docs"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/init.js"></script>
</body>
</html>
`;

// Everything from this origin: the page works on an isolated network, and
// a stray reference to another host fails loudly in the console.
const contentSecurityPolicy =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
  "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** Swagger UI's files the page loads, from the swagger-ui-dist package, by the name the page uses. */
const rendererFiles: Readonly<Record<string, string>> = { "swagger-ui.css": "text/css; charset=utf-8", "swagger-ui-bundle.js": "text/javascript; charset=utf-8" };

/**
 * Serves the REST API's OpenAPI document, generated from the proto
 * (gen/openapi/), at /openapi.json and /openapi.yaml, and a reference page
 * at /docs (Swagger UI, whose files this service serves itself). None of
 * them needs a token: the document describes the API, it grants nothing.
 * The document is read once here; the page's files on first request, so
 * start-up does not pay for them.
 */
export function registerOpenApiRoutes(app: FastifyInstance): void {
  const dir = documentDir();
  const json = readFileSync(path.join(dir, `${documentName}.json`));
  const yaml = readFileSync(path.join(dir, `${documentName}.yaml`));
  const rendererDir = path.dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/absolute-path.js"));
  const files = new Map<string, Promise<Buffer>>();

  app.get("/openapi.json", async (_req, reply) => reply.type("application/json; charset=utf-8").send(json));
  app.get("/openapi.yaml", async (_req, reply) => reply.type("application/yaml; charset=utf-8").send(yaml));
  app.get("/docs", async (_req, reply) => reply.type("text/html; charset=utf-8").header("content-security-policy", contentSecurityPolicy).send(page));
  // The page's own links are relative to /docs: served at /docs/ they would
  // miss. A relative Location keeps a proxy's path prefix.
  app.get("/docs/", async (_req, reply) => reply.redirect("../docs", 301));
  app.get("/docs/init.js", async (_req, reply) => reply.type("text/javascript; charset=utf-8").send(initScript));
  for (const [name, type] of Object.entries(rendererFiles)) {
    app.get(`/docs/${name}`, async (_req, reply) => {
      let file = files.get(name);
      if (file === undefined) {
        file = readFile(path.join(rendererDir, name));
        files.set(name, file);
        // A failed read is not kept: the next request tries again.
        file.catch(() => files.delete(name));
      }
      return reply.type(type).header("cache-control", "public, max-age=86400").send(await file);
    });
  }
}

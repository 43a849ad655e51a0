import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as assert from "uvu/assert";
import type { Backend } from "../support/env.js";
import { documentPath } from "../support/openapi.js";
import { newEntityId, newSourceHash, nextVersionString, putBlob } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

type Answer<T = any> = { status: number; data: T };
type Call<A extends unknown[]> = (...args: [...A, { baseUrl: string; headers: Record<string, string> }?]) => Promise<Answer>;

/** What the push flow uses of the generated client: one function per operationId. */
interface GeneratedClient {
  getUploadUrl: Call<[entityId: string, body: object]>;
  confirmUpload: Call<[entityId: string, body: object]>;
  setActiveVersion: Call<[entityId: string, body: object]>;
  getActiveVersion: Call<[entityId: string]>;
  getDownloadUrl: Call<[entityId: string, versionId: string]>;
  listVersions: (entityId: string, query: { pageSize?: number }, opts: { baseUrl: string; headers: Record<string, string> }) => Promise<Answer>;
}

let generated: Promise<GeneratedClient> | undefined;

/**
 * A TypeScript client generated from the document, as another team would
 * make one: oazapfts (types and fetch calls, one function per operation),
 * into a temporary folder that sees this repository's node_modules; it
 * must type-check under strict settings before it is used.
 */
function generatedClient(): Promise<GeneratedClient> {
  generated ??= (async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ev-openapi-client-"));
    fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"));
    fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ type: "module" }));
    const compilerOptions = { target: "ES2023", lib: ["ES2023", "DOM"], module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, skipLibCheck: true, verbatimModuleSyntax: true, types: [] };
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, include: ["api.ts"] }));
    execFileSync(process.execPath, [path.join(root, "node_modules/oazapfts/dist/cli.js"), documentPath, path.join(dir, "api.ts")], { stdio: "pipe" });
    execFileSync(path.join(root, "node_modules/.bin/tsc"), ["-p", dir], { stdio: "pipe" });
    return (await import(pathToFileURL(path.join(dir, "api.ts")).href)) as GeneratedClient;
  })();
  return generated;
}

/** A push and its reads through a client generated from the OpenAPI document. */
export function openapiClientSuite(backend: Backend) {
  const s = serviceSuite("OpenAPI: a TypeScript client generated from the document pushes and reads", backend);

  s("upload-url, PUT, confirm, activate, read the active version, download, list", async ({ svc }) => {
    const api = await generatedClient();
    const opts = { baseUrl: svc.url, headers: svc.rest.defaultHeaders };
    const entity = newEntityId("client");
    const version = nextVersionString();
    const sourceHash = newSourceHash();
    const content = `package pushed through a generated client ${version}`;

    const upload = await api.getUploadUrl(entity, { version, source_hash: sourceHash }, opts);
    assert.is(upload.status, 200, JSON.stringify(upload.data));
    assert.is(await putBlob(upload.data.upload_url, content, upload.data.upload_headers), 201);

    const confirm = await api.confirmUpload(entity, { storage_path: upload.data.storage_path, version, source_hash: sourceHash, file_size_bytes: Buffer.byteLength(content) }, opts);
    assert.is(confirm.status, 201, JSON.stringify(confirm.data));
    assert.is(confirm.data.created, true);
    const created = confirm.data.version;
    assert.is(created.file_size_bytes, Buffer.byteLength(content));

    const activated = await api.setActiveVersion(entity, { version_id: created.id }, opts);
    assert.is(activated.status, 200, JSON.stringify(activated.data));
    assert.is(activated.data.is_active, true);

    const active = await api.getActiveVersion(entity, opts);
    assert.is(active.status, 200);
    assert.equal(active.data, { ...created, is_active: true });

    const download = await api.getDownloadUrl(entity, created.id, opts);
    assert.is(download.status, 200);
    assert.is(await (await fetch(download.data.download_url)).text(), content);

    const list = await api.listVersions(entity, { pageSize: 10 }, opts);
    assert.is(list.status, 200);
    assert.equal(list.data.versions.map((v: { id: string }) => v.id), [created.id]);

    // An error answer arrives typed by its status: 409 with the tip to reconcile with.
    const stale = await api.getUploadUrl(entity, { version: nextVersionString(), source_hash: newSourceHash() }, opts);
    assert.is(stale.status, 409);
    assert.is(stale.data.code, "STALE_BASE");
    assert.is(stale.data.latest_version.id, created.id);
  });

  return s;
}

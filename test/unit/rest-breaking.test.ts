// The breaks buf breaking cannot see, found by comparing option values.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { type Image, restBreaks } from "../../tools/rest-breaking.js";

const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-rest-breaking-")), "image.json");
execFileSync("node_modules/.bin/buf", ["build", "proto", "-o", file]);
const image = JSON.parse(fs.readFileSync(file, "utf8")) as Image;
fs.rmSync(path.dirname(file), { recursive: true, force: true });

type Json = { [key: string]: any };
const ours = (img: Image) => img.file.find((f) => f.name === "entityversions/v1/entity_versions.proto") as Json;

test("the same proto breaks nothing", () => {
  assert.equal(restBreaks(image, structuredClone(image)), []);
});

test("a changed REST path, success status, or a request field newly REQUIRED is a break; a new RPC, binding or response mark, or a field no longer required, is not", () => {
  const changed = structuredClone(image);
  const file = ours(changed);
  const methods = file.service.find((s: Json) => s.name === "EntityVersionsService").method as Json[];
  methods.find((m) => m.name === "GetUploadUrl")!.options["[google.api.http]"].post = "/api/v2/entities/{entity_id}/versions/upload-url";
  delete methods.find((m) => m.name === "ConfirmUpload")!.options["[entityversions.v1.created_when]"];
  methods.push({ name: "Added", options: { "[google.api.http]": { get: "/api/added" } } });
  const confirm = file.messageType.find((m: Json) => m.name === "ConfirmUploadRequest");
  const base = confirm.field.find((f: Json) => f.name === "base_version_id");
  base.options = { ...base.options, "[google.api.field_behavior]": ["REQUIRED"] };
  const entity = confirm.field.find((f: Json) => f.name === "entity_id");
  entity.options = {};
  // A new REQUIRED field in an existing request: a break.
  const download = file.messageType.find((m: Json) => m.name === "GetDownloadUrlRequest");
  download.field.push({ name: "channel", number: 99, type: "TYPE_STRING", options: { "[google.api.field_behavior]": ["REQUIRED"] } });
  // Harmless: a response field marked REQUIRED, another binding for an RPC.
  const answer = file.messageType.find((m: Json) => m.name === "GetDownloadUrlResponse");
  answer.field[0].options = { ...answer.field[0].options, "[google.api.field_behavior]": ["REQUIRED"] };
  const getVersion = methods.find((m) => m.name === "GetVersion")!;
  getVersion.options["[google.api.http]"].additionalBindings = [{ get: "/api/v2/entities/{entity_id}/versions/{version_id}" }];
  const breaks = restBreaks(image, changed);
  assert.is(breaks.length, 4, breaks.join("\n"));
  assert.match(breaks.join("\n"), "GetDownloadUrlRequest.channel: a new field, REQUIRED");
  assert.match(breaks.join("\n"), "GetUploadUrl: its google.api.http binding changed");
  assert.match(breaks.join("\n"), "ConfirmUpload: its entityversions.v1.created_when option changed");
  assert.match(breaks.join("\n"), "ConfirmUploadRequest.base_version_id: newly REQUIRED");
});

test("a new RPC named as another service's renames that operation in generated clients: a break; a new name is not", () => {
  const changed = structuredClone(image);
  const file = changed.file.find((f) => f.name === "entityversions/v1/entity_events.proto") as Json;
  const eventsService = file.service.find((s: Json) => s.name === "EntityEventsService");
  const versions = (ours(changed).service as Json[]).find((s: Json) => s.name === "EntityVersionsService")!;
  versions.method.push({ name: "ListEvents", options: { "[google.api.http]": { get: "/api/entities/{entity_id}/version-events" } } });
  versions.method.push({ name: "CountVersions", options: { "[google.api.http]": { get: "/api/entities/{entity_id}/versions:count" } } });
  assert.ok(eventsService.method.some((m: Json) => m.name === "ListEvents"), "the name is taken in the events service");
  const breaks = restBreaks(image, changed);
  assert.equal(breaks.length, 1, breaks.join("\n"));
  assert.match(breaks[0]!, "ListEvents: another service's RPC of this name renames the existing operation (operationId ListEvents)");
});

test.run();

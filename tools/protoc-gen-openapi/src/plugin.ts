import { create, createFileRegistry, protoInt64 } from "@bufbuild/protobuf";
import {
  type CodeGeneratorRequest,
  CodeGeneratorResponse_Feature,
  CodeGeneratorResponseSchema,
  FileDescriptorSetSchema,
} from "@bufbuild/protobuf/wkt";
import type { Plugin } from "@bufbuild/protoplugin";
import { stringify } from "yaml";
import { openApiDocument } from "./document.js";
import { parseParameter } from "./parameter.js";

/**
 * Writes the OpenAPI document of the request's files as NAME.json and
 * NAME.yaml (the same document). Run with strategy `all`, so that one
 * document describes every service; no file is written when no RPC has a
 * google.api.http rule.
 */
export const protocGenOpenapi: Plugin = {
  name: "protoc-gen-openapi",
  version: "v1",
  run(request: CodeGeneratorRequest) {
    const options = parseParameter(request.parameter);
    const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: request.protoFile }));
    const services = request.fileToGenerate.flatMap((name) => registry.getFile(name)?.services ?? []);
    const document = openApiDocument(services, registry, options);
    return create(CodeGeneratorResponseSchema, {
      supportedFeatures: protoInt64.parse(CodeGeneratorResponse_Feature.PROTO3_OPTIONAL),
      file:
        document === undefined
          ? []
          : [
              { name: `${options.file}.json`, content: `${JSON.stringify(document, null, 2)}\n` },
              { name: `${options.file}.yaml`, content: stringify(document, { lineWidth: 0, aliasDuplicateObjects: false }) },
            ],
    });
  },
};

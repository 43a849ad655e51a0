// The plugin's entry point: reads a CodeGeneratorRequest on stdin, writes
// the response on stdout (bin/protoc-gen-openapi.js runs it through tsx).
import { runNodeJs } from "@bufbuild/protoplugin";
import { protocGenOpenapi } from "./plugin.js";

runNodeJs(protocGenOpenapi);

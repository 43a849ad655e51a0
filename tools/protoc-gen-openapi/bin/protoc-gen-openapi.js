#!/usr/bin/env node
// buf runs local plugins as executables. The plugin is TypeScript and
// shares the REST gateway's own rules (src/rest/), so it runs through tsx.
import { register } from "tsx/esm/api";

register();
await import("../src/protoc-gen-openapi.ts");

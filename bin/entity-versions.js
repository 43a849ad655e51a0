#!/usr/bin/env node
// The `entity-versions` command. The CLI is TypeScript run through tsx, a
// runtime dependency, as `npm start` runs the service, so it works the
// same from a clone, after `npm link` and from an installed package.
import { register } from "tsx/esm/api";

register();
await import("../src/cli/main.ts");

// Mints an HS256 token for development and testing:
//   npm run token -- --sub alice --roles publisher --orgs acme,beta --ttl 3600
// Signs with AUTH_JWT_SECRET, or in development mode with the secret
// `npm start` keeps under DATA_DIR; issuer and audience follow AUTH_ISSUER
// and AUTH_AUDIENCE.
import path from "node:path";
import { parseArgs } from "node:util";
import { mintToken } from "../auth/tokens.js";
import { ConfigError, loadConfig } from "../config.js";
import { localSecret } from "../local-secret.js";

const list = (value: string | undefined) => (value === undefined || value === "" ? [] : value.split(",").map((s) => s.trim()));

try {
  const { values } = parseArgs({
    options: {
      sub: { type: "string", default: "dev" },
      roles: { type: "string", default: "publisher" },
      orgs: { type: "string", default: "" },
      ttl: { type: "string", default: "3600" },
    },
  });
  const config = loadConfig();
  if (config.auth.secret === undefined && config.auth.mode !== "dev") {
    throw new ConfigError("tokens for AUTH_JWKS_URL are minted by your identity provider; this tool signs HS256 with AUTH_JWT_SECRET only.");
  }
  const secret = config.auth.secret ?? localSecret(path.join(config.dataDir, "auth-dev-secret")).toString("base64");
  const ttlSeconds = Number(values.ttl);
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) throw new ConfigError("--ttl must be a whole number of seconds.");
  process.stdout.write(
    `${await mintToken(secret, {
      sub: values.sub,
      roles: list(values.roles),
      orgs: list(values.orgs),
      ttlSeconds,
      ...(config.auth.issuer === undefined ? {} : { issuer: config.auth.issuer }),
      ...(config.auth.audience === undefined ? {} : { audience: config.auth.audience }),
    })}\n`,
  );
} catch (error) {
  process.stderr.write(`token: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(2);
}

// Mints an HS256 token for development and testing:
//   npm run token -- --sub alice --roles publisher --orgs acme,beta --ttl 3600
// Signs with AUTH_JWT_SECRET, or in development mode with the secret
// `npm start` keeps under DATA_DIR (never one of its own, see
// developmentSecret); issuer and audience follow AUTH_ISSUER and
// AUTH_AUDIENCE.
import path from "node:path";
import { parseArgs } from "node:util";
import { claimsProblem } from "../auth/claims.js";
import { adminRole, publisherRole } from "../auth/policy.js";
import { mintToken } from "../auth/tokens.js";
import { ConfigError, loadAuthConfig } from "../config.js";
import { devTokensSigned, existingLocalSecret } from "../local-secret.js";

const usage = `Prints a signed HS256 token on stdout.

  npm run -s token -- [--sub NAME] [--roles r1,r2] [--orgs o1,o2] [--ttl SECONDS]

  --sub    the user (default dev)
  --roles  comma-separated, of publisher and admin; "" for none (default publisher)
  --orgs   the user's organizations (default none)
  --ttl    seconds until it expires (default 3600, or AUTH_MAX_TOKEN_LIFETIME if shorter)

Signs with AUTH_JWT_SECRET, else with the development secret npm start keeps
under DATA_DIR (./data): start the service once first, with the same DATA_DIR.
iss and aud follow AUTH_ISSUER and AUTH_AUDIENCE.
Example: TOKEN=$(npm run -s token -- --sub alice --orgs acme)
`;

const knownRoles: readonly string[] = [publisherRole, adminRole];

/**
 * The development secret the service wrote. Never made here: a DATA_DIR
 * unset or mistyped would get a secret of its own, and tokens the running
 * service refuses (TOKEN_BAD_SIGNATURE) with nothing saying why.
 */
function developmentSecret(file: string): string {
  const secret = existingLocalSecret(file, devTokensSigned);
  if (secret === undefined) {
    throw new ConfigError(`no development secret in ${file}: start the service once with \`npm start\` (it writes it), or set DATA_DIR to the folder the service uses`);
  }
  return secret.toString("base64");
}

const list = (value: string | undefined) => (value === undefined || value === "" ? [] : value.split(",").map((s) => s.trim()));

try {
  const { values } = parseArgs({
    options: {
      sub: { type: "string", default: "dev" },
      roles: { type: "string", default: "publisher" },
      orgs: { type: "string", default: "" },
      ttl: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    process.exit(0);
  }
  const config = loadAuthConfig();
  if (config.auth.secret === undefined && config.auth.mode !== "dev") {
    throw new ConfigError("tokens for AUTH_JWKS_URL are minted by your identity provider; this tool signs HS256 with AUTH_JWT_SECRET only.");
  }
  const secret = config.auth.secret ?? developmentSecret(path.join(config.dataDir, "auth-dev-secret"));
  const longest = config.auth.maxTokenLifetimeSeconds;
  // An hour by default, or less where the service accepts no longer.
  const ttlSeconds = values.ttl === undefined ? Math.min(3600, longest ?? 3600) : Number(values.ttl);
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) throw new ConfigError("--ttl must be a whole number of seconds, at least 1.");
  if (longest !== undefined && ttlSeconds > longest) {
    throw new ConfigError(`--ttl ${ttlSeconds} is longer than the service accepts (AUTH_MAX_TOKEN_LIFETIME, ${longest} s): give --ttl ${longest} or less.`);
  }
  const roles = list(values.roles);
  const unknownRole = roles.find((role) => !knownRoles.includes(role));
  if (unknownRole !== undefined) throw new ConfigError(`--roles: "${unknownRole}" is not a role; the roles are ${knownRoles.join(" and ")} ("" for none).`);
  // Never a token the service would refuse.
  const problem = claimsProblem({ sub: values.sub, roles, orgs: list(values.orgs) });
  if (problem !== undefined) throw new ConfigError(`the service would refuse this token (${problem}): fix --sub, --roles or --orgs (ids have no spaces).`);
  process.stdout.write(
    `${await mintToken(secret, {
      sub: values.sub,
      roles,
      orgs: list(values.orgs),
      ttlSeconds,
      ...(config.auth.issuer === undefined ? {} : { issuer: config.auth.issuer }),
      ...(config.auth.audience === undefined ? {} : { audience: config.auth.audience }),
    })}\n`,
  );
} catch (error) {
  process.stderr.write(`token: ${error instanceof Error ? error.message : String(error)} (npm run -s token -- --help)\n`);
  process.exit(2);
}

import type { Command } from "commander";
import { claimsProblem } from "../../auth/claims.js";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
import { CliError } from "../cli-error.js";
import { ExitCode } from "../exit-codes.js";
import { requireToken } from "../settings.js";
import { summariseToken } from "../token-claims.js";

async function whoami(options: CommonOptions): Promise<void> {
  const { output, settings } = contextOf(options);
  const summary = summariseToken(requireToken(settings));
  output.result(
    { claims: summary.claims, expires_at: summary.expiresAt ?? null, expired: summary.expired, token_source: settings.tokenSource, url: settings.url },
    () =>
      [
        `user:     ${summary.sub ?? "(no sub claim: the service will refuse this token)"}`,
        `roles:    ${summary.roles.length === 0 ? "(none)" : summary.roles.join(", ")}`,
        `orgs:     ${summary.orgs.length === 0 ? "(none)" : summary.orgs.join(", ")}`,
        `expires:  ${summary.expiresAt === undefined ? "(no valid exp claim: the service will refuse this token)" : `${summary.expiresAt}${summary.expired ? " (EXPIRED: get a new token)" : ""}`}`,
        `token:    from ${settings.tokenSource ?? "?"}`,
        `service:  ${settings.url} (from ${settings.urlSource})`,
      ].join("\n"),
  );
  // A script that asks `whoami` before it deploys must not go on with a
  // token every call would refuse: the claims are printed, and the exit
  // says the token is not usable, with the code the service would answer.
  if (summary.expired) {
    throw new CliError(`the token expired at ${summary.expiresAt}: get a new one and pass it with --token or ENTITY_VERSIONS_TOKEN.`, "TOKEN_EXPIRED", ExitCode.noAccess);
  }
  if (summary.sub === undefined || summary.expiresAt === undefined) {
    throw new CliError(`the token has no ${summary.sub === undefined ? "sub" : "valid exp"} claim, and the service refuses it: get a token with both.`, "TOKEN_CLAIMS_INVALID", ExitCode.noAccess);
  }
  const problem = claimsProblem(summary.claims);
  if (problem !== undefined) {
    throw new CliError(`the service refuses this token's claims (${problem}): get a token whose claims have those shapes.`, "TOKEN_CLAIMS_INVALID", ExitCode.noAccess);
  }
}

/** `whoami`: the token's claims, decoded locally. */
export function registerWhoami(program: Command): void {
  withCommonOptions(
    program.command("whoami")
      .summary("show who the token says you are")
      .description(
        prose(`Decodes the token's claims locally (no call, no secret needed): the user (sub), roles, organizations, expiry,
and where the token and the URL came from. The service still verifies the token's signature on every call.
With --json: {claims, expires_at, expired, token_source, url}. Exits 4 when the token has expired, lacks sub or exp, or
has claims the service refuses (a sub with spaces, roles that are not a list of ids): TOKEN_EXPIRED, TOKEN_CLAIMS_INVALID,
after printing what it holds.`),
      )
      .addHelpText("after", '\nExamples:\n  $ entity-versions whoami\n  $ entity-versions whoami --token "$(cat data/dev-token)" --json')
      .action((options: CommonOptions) => whoami(options)),
    "print one JSON document on stdout: {claims, expires_at, expired, token_source, url} (no call is made)",
  );
}

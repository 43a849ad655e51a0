import type { Command } from "commander";
import { type CommonOptions, contextOf, prose, withCommonOptions } from "../command-context.js";
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
        `expires:  ${summary.expiresAt === undefined ? "(no exp claim: the service will refuse this token)" : `${summary.expiresAt}${summary.expired ? " (EXPIRED: get a new token)" : ""}`}`,
        `token:    from ${settings.tokenSource ?? "?"}`,
        `service:  ${settings.url} (from ${settings.urlSource})`,
      ].join("\n"),
  );
}

/** `whoami`: the token's claims, decoded locally. */
export function registerWhoami(program: Command): void {
  withCommonOptions(
    program.command("whoami")
      .summary("show who the token says you are")
      .description(
        prose(`Decodes the token's claims locally (no call, no secret needed): the user (sub), roles, organizations, expiry,
and where the token and the URL came from. The service still verifies the token's signature on every call.
With --json: {claims, expires_at, expired, token_source, url}.`),
      )
      .addHelpText("after", '\nExamples:\n  $ entity-versions whoami\n  $ entity-versions whoami --token "$(cat data/dev-token)" --json')
      .action((options: CommonOptions) => whoami(options)),
  );
}

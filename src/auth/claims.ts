import { principalIdPattern } from "../domain/identifiers.js";

/** The most ids a roles or orgs claim may list. */
export const maxListClaim = 500;

/**
 * What is wrong with a token's claims in the shapes the service reads
 * (`sub` a user id; `roles` and `orgs`, when present, arrays of ids), or
 * undefined when nothing is. One rule for the three places that judge a
 * token: the service, which refuses it TOKEN_CLAIMS_INVALID; the CLI's
 * `whoami`, which says so before a script deploys with it; and
 * `npm run token`, which never mints one.
 */
export function claimsProblem(claims: Readonly<Record<string, unknown>>): string | undefined {
  if (typeof claims["sub"] !== "string" || !principalIdPattern.test(claims["sub"])) {
    return "sub must be a user id of 1 to 255 printable characters without spaces";
  }
  for (const claim of ["roles", "orgs"]) {
    const value = claims[claim];
    if (value === undefined) continue;
    if (!Array.isArray(value) || value.length > maxListClaim || !value.every((v) => typeof v === "string" && principalIdPattern.test(v))) {
      return `"${claim}" must be an array of at most ${maxListClaim} ids`;
    }
  }
  return undefined;
}

import { type ApiClient, apiPath } from "./api-client.js";
import { CliError } from "./cli-error.js";
import type { RestVersion, RestVersionList } from "./rest-types.js";

/** The version a rollback activates, the one it replaces, and why that one was chosen (printed). */
export interface RollbackChoice {
  readonly active: RestVersion;
  readonly target: RestVersion;
  readonly reason: string;
}

/** Picks the version `rollback` activates; a strategy, so that another can replace it. */
export type RollbackStrategy = (api: ApiClient, entity: string) => Promise<RollbackChoice>;

const pageSize = 100;

/**
 * The version created just before the active one. The service keeps no
 * history of activations yet, so "the version that was active before"
 * cannot be known; creation order is what it can answer. Once the service
 * records activations (its events API), a strategy reading them can take
 * this one's place in `rollback`.
 */
export const previousByCreation: RollbackStrategy = async (api, entity) => {
  const active = (await api.call<RestVersion>("GET", apiPath("entities", entity, "active-version"))).body;
  let pageToken = "";
  let foundActive = false;
  do {
    const query = `?page_size=${pageSize}${pageToken === "" ? "" : `&page_token=${encodeURIComponent(pageToken)}`}`;
    const page = (await api.call<RestVersionList>("GET", `${apiPath("entities", entity, "versions")}${query}`)).body;
    for (const version of page.versions) {
      // Newest first: the first version after the active one is the one created before it.
      if (foundActive) {
        return { active, target: version, reason: `the version created just before ${active.version} (the service keeps no history of activations, so rollback goes by creation order)` };
      }
      if (version.id === active.id) foundActive = true;
    }
    pageToken = page.next_page_token;
  } while (pageToken !== "");
  throw new CliError(
    foundActive
      ? `the active version ${active.version} (id ${active.id}) is the oldest version of ${entity}: there is nothing before it to roll back to.`
      : `the active version ${active.version} (id ${active.id}) is not in the list of ${entity}'s versions (deleted meanwhile?): run rollback again.`,
    "NO_EARLIER_VERSION",
  );
};

import { type ApiClient, apiPath, pageQuery } from "./api-client.js";
import { CliError, ServiceError } from "./cli-error.js";
import type { RestEventList, RestVersion, RestVersionList } from "./rest-types.js";

/** The version a rollback activates, the one it replaces, and why that one was chosen (printed). */
export interface RollbackChoice {
  readonly active: RestVersion;
  readonly target: RestVersion;
  readonly reason: string;
}

/** Picks the version `rollback` activates; a strategy, so that another can replace it. */
export type RollbackStrategy = (api: ApiClient, entity: string) => Promise<RollbackChoice>;

const pageSize = 100;

function activeVersion(api: ApiClient, entity: string): Promise<RestVersion> {
  return api.call<RestVersion>("GET", apiPath("entities", entity, "active-version")).then((res) => res.body);
}

/**
 * The version created just before `active`: what rollback falls back on
 * when the entity's events cannot say which version was active before
 * (none was, or that version has been deleted). `active` is the active
 * version as the caller read it: read again here, an activation in between would
 * become what the rollback's compare-and-set expects, and be undone.
 */
async function createdBefore(api: ApiClient, entity: string, active: RestVersion): Promise<RollbackChoice> {
  let pageToken = "";
  let foundActive = false;
  do {
    const query = pageQuery({ limit: pageSize, ...(pageToken === "" ? {} : { pageToken }) });
    const page = (await api.call<RestVersionList>("GET", `${apiPath("entities", entity, "versions")}${query}`)).body;
    for (const version of page.versions) {
      // Newest first: the first version after the active one is the one created before it.
      if (foundActive) {
        return { active, target: version, reason: `the version created just before ${active.version}` };
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
}

/**
 * The version that was active before the active one, read from the
 * entity's events: the newest activation of the active version names the
 * version it replaced. When there was none, or it has been deleted since,
 * the version created just before the active one (createdBefore), and
 * the reason says so.
 */
export const previouslyActive: RollbackStrategy = async (api, entity) => {
  const active = await activeVersion(api, entity);
  let pageToken = "";
  do {
    const query = pageQuery({ limit: pageSize, ...(pageToken === "" ? {} : { pageToken }) });
    const page = (await api.call<RestEventList>("GET", `${apiPath("entities", entity, "events")}${query}`)).body;
    for (const event of page.events) {
      if (event.type !== "EVENT_TYPE_ACTIVE_VERSION_CHANGED" || event.version_id !== active.id) continue;
      const before = event.previous_active_version_id;
      const fallback = async (why: string) => {
        const choice = await createdBefore(api, entity, active);
        return { ...choice, reason: `${choice.reason}: ${why}` };
      };
      if (before === undefined) return fallback(`no version was active before ${active.version}`);
      try {
        const target = (await api.call<RestVersion>("GET", apiPath("entities", entity, "versions", before))).body;
        return { active, target, reason: `the version that was active before ${active.version} (${active.version} was activated by ${event.actor}${event.occurred_at === undefined ? "" : ` at ${event.occurred_at}`})` };
      } catch (error) {
        if (error instanceof ServiceError && error.code === "VERSION_NOT_FOUND") return fallback(`the version active before ${active.version} (id ${before}) has been deleted`);
        throw error;
      }
    }
    pageToken = page.next_page_token;
  } while (pageToken !== "");
  const choice = await createdBefore(api, entity, active);
  return { ...choice, reason: `${choice.reason}: the entity's events do not say what was active before` };
};

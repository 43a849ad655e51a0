// Which version rollback picks, against a scripted API: the choice's
// "active" must be the version read first, or a compare-and-set built on
// it would pass over an activation made in between.
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { ApiClient } from "../../src/cli/api-client.js";
import type { RestVersion } from "../../src/cli/rest-types.js";
import { previouslyActive } from "../../src/cli/rollback-target.js";

const version = (n: number): RestVersion => ({
  id: `w${n}`,
  entity_id: "app",
  version: `2026.02.0${n}-000000`,
  source_hash: "a".repeat(64),
  storage_path: `versions/app/w${n}/package`,
  file_size_bytes: 1,
  service_dependencies: [],
  published_by: "dev",
  created_at: `2026-02-0${n}T00:00:00.000Z`,
  is_active: false,
});

/** An API whose active version changes after the first read: another deployer activates w4. */
function racingApi(): ApiClient {
  let activeReads = 0;
  const answers = (path: string): unknown => {
    if (path.endsWith("/active-version")) return activeReads++ === 0 ? version(3) : version(4);
    if (path.includes("/events")) {
      // w3's activation, with nothing active before it.
      return { events: [{ id: "5", entity_id: "app", type: "EVENT_TYPE_ACTIVE_VERSION_CHANGED", actor: "dev", version_id: "w3" }], next_page_token: "" };
    }
    if (path.includes("/versions")) return { versions: [version(4), version(3), version(2), version(1)], next_page_token: "" };
    throw new Error(`unexpected ${path}`);
  };
  return { call: async (_method: string, path: string) => ({ status: 200, body: answers(path), attempts: 1 }) } as unknown as ApiClient;
}

test("a rollback that falls back to the version created before the active one keeps the active version it read first", async () => {
  const choice = await previouslyActive(racingApi(), "app");
  assert.is(choice.active.id, "w3", "the version the rollback decided from, which its compare-and-set expects");
  assert.is(choice.target.id, "w2");
  assert.match(choice.reason, "no version was active before 2026.02.03-000000");
});

test.run();

import type { Knex } from "knex";
import * as assert from "uvu/assert";
import { type Backend, connectTestDatabase } from "../support/env.js";
import { grpc } from "../support/grpc-client.js";
import { watchGrpc } from "../support/watch-client.js";
import type { RestClient } from "../support/rest.js";
import { newEntityId, push, type TestService, uploadOnly } from "../support/service.js";
import { serviceSuite } from "../support/suite.js";
import { bearer, token } from "../support/tokens.js";

const v = (e: string) => `/api/entities/${e}`;

/** An event over REST as one comparable line: id, type, actor, then what it names. */
function line(e: Record<string, any>): string {
  const type = String(e["type"]).replace(/^EVENT_TYPE_/, "");
  const change = e["access_change"];
  const what =
    change === undefined ? [e["version_id"] ?? "-", e["previous_active_version_id"] ?? "-"] : [String(change.kind).replace(/^ACCESS_CHANGE_KIND_/, ""), change.subject_id];
  return [e["id"], type, e["actor"], ...what].join(" ");
}

/** Every event of the entity, newest first, read page by page: 50 pages at most (the tests' entities have a few dozen events), so that a token that never runs out fails rather than hangs. */
async function allEvents(client: RestClient, entityId: string, pageSize = 100): Promise<string[]> {
  const lines: string[] = [];
  let token = "";
  for (let pages = 0; ; pages++) {
    if (pages === 50) assert.unreachable(`still a next page after ${pages} pages of ${pageSize}; read ${JSON.stringify(lines)}`);
    const res = await client.get(`${v(entityId)}/events?page_size=${pageSize}${token === "" ? "" : `&page_token=${encodeURIComponent(token)}`}`);
    assert.is(res.status, 200, JSON.stringify(res.body));
    lines.push(...(res.body.events as Array<Record<string, any>>).map(line));
    token = res.body.next_page_token;
    if (token === "") return lines;
  }
}

/** Clients acting as a named user with these roles (and organizations). */
async function as(svc: TestService, sub: string, roles: string[], orgs: string[] = []): Promise<RestClient> {
  return svc.restAs(bearer(await token({ sub, roles, orgs })));
}

/** A database trigger that refuses a write, on MySQL or SQLite: how a test makes one statement of a transaction fail. */
async function refuseWrites(knex: Knex, backend: Backend, name: string, table: string, event: "insert" | "update", when: string): Promise<() => Promise<void>> {
  if (backend === "mysql") {
    await knex.raw(
      `create trigger ${name} before ${event} on ${table} for each row begin if ${when} then signal sqlstate '45000' set message_text = 'refused by the test'; end if; end`,
    );
  } else {
    await knex.raw(`create trigger ${name} before ${event} on ${table} for each row when ${when.replace(/<>/g, "is not")} begin select raise(abort, 'refused by the test'); end`);
  }
  return async () => void (await knex.raw(`drop trigger ${name}`));
}

/**
 * The event log: every change records exactly its events, in its own
 * transaction, and ListEvents reads them back newest first; compare-and-set
 * activation.
 */
export function eventsSuite(backend: Backend) {
  const s = serviceSuite("events: each change records its events in its transaction; ListEvents; compare-and-set activation", backend);

  s("every change records one event (a push with set_as_active two, its first push's claim one more), with its actor; changes that change nothing record none", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const admin = await as(svc, "root", ["admin"]);
    const e = newEntityId();
    const v1 = (await push({ rest: owner }, e, { setAsActive: true })).confirm!.body.version.id as string;
    const v2 = (await push({ rest: owner }, e, { base: v1 })).confirm!.body.version.id as string;
    const ok = async (res: Promise<{ status: number; body: unknown }>) => assert.is((await res).status, 200, JSON.stringify((await res).body));
    await ok(admin.put(`${v(e)}/active-version`, { versionId: v2 }));
    await ok(admin.put(`${v(e)}/active-version`, { versionId: v2 }));
    await ok(owner.post(`${v(e)}/shares`, { user_id: "bob" }));
    await ok(owner.post(`${v(e)}/shares`, { user_id: "bob" }));
    await ok(owner.delete(`${v(e)}/shares/carol`));
    await ok(owner.delete(`${v(e)}/shares/bob`));
    await ok(owner.put(`${v(e)}/stores/orgs/acme`, undefined));
    await ok(owner.put(`${v(e)}/stores/orgs/acme`, undefined));
    await ok(owner.delete(`${v(e)}/stores/orgs/acme`));
    await ok(owner.delete(`${v(e)}/stores/orgs/acme`));
    await ok(admin.put(`${v(e)}/stores/public`, undefined));
    await ok(admin.put(`${v(e)}/stores/public`, undefined));
    await ok(admin.delete(`${v(e)}/stores/public`));
    await ok(owner.post(`${v(e)}/publishers`, { user_id: "dave" }));
    await ok(owner.post(`${v(e)}/publishers`, { user_id: "owner" }));
    await ok(owner.delete(`${v(e)}/publishers/dave`));
    await ok(owner.delete(`${v(e)}/publishers/erin`));
    await ok(owner.delete(`${v(e)}/versions/${v1}`));
    const expected = [
      `1 ACCESS_CHANGED owner PUBLISHER_ADDED owner`,
      `2 VERSION_CREATED owner ${v1} -`,
      `3 ACTIVE_VERSION_CHANGED owner ${v1} -`,
      `4 VERSION_CREATED owner ${v2} -`,
      `5 ACTIVE_VERSION_CHANGED root ${v2} ${v1}`,
      `6 ACCESS_CHANGED owner SHARE_ADDED bob`,
      `7 ACCESS_CHANGED owner SHARE_REMOVED bob`,
      `8 ACCESS_CHANGED owner ORG_STORE_ADDED acme`,
      `9 ACCESS_CHANGED owner ORG_STORE_REMOVED acme`,
      `10 ACCESS_CHANGED root PUBLIC_STORE_ADDED `,
      `11 ACCESS_CHANGED root PUBLIC_STORE_REMOVED `,
      `12 ACCESS_CHANGED owner PUBLISHER_ADDED dave`,
      `13 ACCESS_CHANGED owner PUBLISHER_REMOVED dave`,
      `14 VERSION_DELETED owner ${v1} -`,
    ];
    assert.equal(await allEvents(owner, e), [...expected].reverse());
    // Pages of three walk the same list; the fields are as documented.
    assert.equal(await allEvents(owner, e, 3), [...expected].reverse());
    const [deleted] = (await owner.get(`${v(e)}/events?page_size=1`)).body.events;
    assert.match(deleted.occurred_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    assert.match(deleted.version, /^\d{4}\.\d\d\.\d\d-\d{6}$/, "a deleted version's string is kept in its event");
    assert.equal(Object.keys(deleted).sort(), ["actor", "entity_id", "id", "occurred_at", "type", "version", "version_id"]);
    // gRPC answers the same events.
    const viaGrpc = await svc.grpcAs(bearer(await token({ sub: "owner", roles: ["publisher"] }))).call<{ events: Array<Record<string, any>> }>("ListEvents", { entity_id: e, page_size: 3 });
    assert.ok(viaGrpc.ok);
    assert.equal(viaGrpc.value.events.map((x) => `${x["id"]} ${x["type"]}`), ["14 EVENT_TYPE_VERSION_DELETED", "13 EVENT_TYPE_ACCESS_CHANGED", "12 EVENT_TYPE_ACCESS_CHANGED"]);
  });

  s("readers see that access changed, not whom it was about: subjects are for those who may read the access lists", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const reader = await as(svc, "reader", []);
    const e = newEntityId();
    await push({ rest: owner }, e);
    assert.is((await owner.post(`${v(e)}/shares`, { user_id: "reader" })).status, 200);
    assert.is((await owner.put(`${v(e)}/stores/orgs/secret-partner`, undefined)).status, 200);
    const watch = watchGrpc(svc.grpcAs(reader.defaultHeaders), e, { afterEventId: "2" });
    const forOwner = watchGrpc(svc.grpcAs(owner.defaultHeaders), e, { afterEventId: "2" });
    try {
      assert.equal((await allEvents(owner, e)).slice(0, 2), ["4 ACCESS_CHANGED owner ORG_STORE_ADDED secret-partner", "3 ACCESS_CHANGED owner SHARE_ADDED reader"]);
      assert.equal((await allEvents(reader, e)).slice(0, 2), ["4 ACCESS_CHANGED owner ORG_STORE_ADDED ", "3 ACCESS_CHANGED owner SHARE_ADDED "]);
      assert.equal((await watch.events(2)).map((x) => x.access), ["SHARE_ADDED:", "ORG_STORE_ADDED:"]);
      assert.equal((await forOwner.events(2)).map((x) => x.access), ["SHARE_ADDED:reader", "ORG_STORE_ADDED:secret-partner"]);
      // Made a publisher mid-watch, the reader sees the subjects of the events after that.
      assert.is((await owner.post(`${v(e)}/publishers`, { user_id: "reader" })).status, 200);
      assert.is((await owner.post(`${v(e)}/shares`, { user_id: "carol" })).status, 200);
      const readerAsPublisher = await as(svc, "reader", ["publisher"]);
      assert.equal((await allEvents(readerAsPublisher, e))[0], "6 ACCESS_CHANGED owner SHARE_ADDED carol");
    } finally {
      watch.close();
      forOwner.close();
    }
  });

  s("a change that is refused records nothing", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const reader = await as(svc, "reader", ["publisher"]);
    const stranger = await as(svc, "stranger", ["publisher"]);
    const e = newEntityId();
    const v1 = (await push({ rest: owner }, e, { setAsActive: true })).confirm!.body.version;
    const v2 = (await push({ rest: owner }, e, { base: v1.id })).confirm!.body.version;
    assert.is((await owner.post(`${v(e)}/shares`, { user_id: "reader" })).status, 200);
    const before = await allEvents(owner, e);
    const refusals: Array<[Promise<{ status: number; body: any }>, number, string]> = [
      [push({ rest: owner }, e, { base: v1.id }).then((p) => p.res), 409, "STALE_BASE"],
      [owner.delete(`${v(e)}/versions/${v1.id}`), 400, "ACTIVE_VERSION_NOT_DELETABLE"],
      [owner.delete(`${v(e)}/publishers/owner`), 400, "LAST_PUBLISHER"],
      [owner.put(`${v(e)}/active-version`, { versionId: v2.id, expected_active_version_id: v2.id }), 409, "ACTIVE_VERSION_CHANGED"],
      [owner.put(`${v(e)}/active-version`, { versionId: "no-such-version" }), 404, "VERSION_NOT_FOUND"],
      [reader.put(`${v(e)}/active-version`, { versionId: v2.id }), 403, "PERMISSION_DENIED"],
      [stranger.post(`${v(e)}/shares`, { user_id: "stranger" }), 404, "ENTITY_NOT_FOUND"],
    ];
    for (const [call, status, code] of refusals) {
      const res = await call;
      assert.equal([res.status, res.body.code], [status, code], JSON.stringify(res.body));
    }
    // A confirm answered with an existing version (a duplicate) changes nothing either.
    const again = await push({ rest: owner }, e, { base: v2.id, sourceHash: v2.source_hash, uploadForce: true });
    assert.equal([again.confirm?.status, again.confirm?.body.created], [200, false]);
    assert.equal(await allEvents(owner, e), before);
  });

  s("an event and its change commit together: when either write fails, neither is kept", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const e = newEntityId();
    const v1 = (await push({ rest: owner }, e, { setAsActive: true })).confirm!.body.version.id as string;
    const v2 = (await push({ rest: owner }, e, { base: v1 })).confirm!.body.version.id as string;
    const before = await allEvents(owner, e);
    const knex = connectTestDatabase(backend, svc.db);
    try {
      // The event cannot be written: the activation is not made, nor is a confirm's version.
      let drop = await refuseWrites(knex, backend, "ev_test_no_event", "entity_events", "insert", `new.entity_id = '${e}'`);
      try {
        const activate = await owner.put(`${v(e)}/active-version`, { versionId: v2 });
        assert.equal([activate.status, activate.body.code], [500, "INTERNAL"]);
        const p = await push({ rest: owner }, e, { base: v2 });
        assert.equal([p.confirm?.status, p.confirm?.body.code], [500, "INTERNAL"]);
      } finally {
        await drop();
      }
      assert.is((await owner.get(`${v(e)}/active-version`)).body.id, v1, "the activation was rolled back with its event");
      assert.equal((await owner.get(`${v(e)}/versions`)).body.versions.map((x: { id: string }) => x.id), [v2, v1], "the confirm was rolled back with its events");
      // The change cannot be written after its event was: the event is not kept.
      drop = await refuseWrites(knex, backend, "ev_test_no_change", "entities", "update", `new.id = '${e}' and new.active_version_id <> old.active_version_id`);
      try {
        const activate = await owner.put(`${v(e)}/active-version`, { versionId: v2 });
        assert.equal([activate.status, activate.body.code], [500, "INTERNAL"]);
      } finally {
        await drop();
      }
      assert.equal(await allEvents(owner, e), before, "no event of a change that failed");
      // And the next change numbers on with no gap.
      assert.is((await owner.put(`${v(e)}/active-version`, { versionId: v2 })).status, 200);
      assert.equal((await allEvents(owner, e))[0]!, `${before.length + 1} ACTIVE_VERSION_CHANGED owner ${v2} ${v1}`);
    } finally {
      await knex.destroy();
    }
  });

  s("ListEvents: for everyone who may read the entity, ENTITY_NOT_FOUND for anyone else; page tokens are this list's own", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const e = newEntityId();
    const first = await push({ rest: owner }, e);
    await push({ rest: owner }, e, { base: first.confirm!.body.version.id });
    assert.is((await owner.post(`${v(e)}/shares`, { user_id: "sharee" })).status, 200);
    assert.equal((await allEvents(await as(svc, "sharee", []), e)).length, 4);
    for (const [client, entity] of [
      [await as(svc, "stranger", ["publisher"]), e],
      [owner, newEntityId("missing")],
    ] as const) {
      const res = await client.get(`${v(entity)}/events`);
      assert.equal([res.status, res.body.code], [404, "ENTITY_NOT_FOUND"]);
    }
    const versionsToken = (await owner.get(`${v(e)}/versions?page_size=1`)).body.next_page_token;
    assert.ok(versionsToken !== "");
    const refused = await owner.get(`${v(e)}/events?page_token=${encodeURIComponent(versionsToken)}`);
    assert.equal([refused.status, refused.body.code], [400, "INVALID_ARGUMENT"]);
    const eventsToken = (await owner.get(`${v(e)}/events?page_size=1`)).body.next_page_token;
    const second = await owner.get(`${v(e)}/events?page_size=1&page_token=${encodeURIComponent(eventsToken)}`);
    assert.equal(second.body.events.map((x: { id: string }) => x.id), ["3"]);
    const other = newEntityId();
    await push({ rest: owner }, other);
    const foreign = await owner.get(`${v(other)}/events?page_token=${encodeURIComponent(eventsToken)}`);
    assert.equal([foreign.status, foreign.body.code], [400, "INVALID_ARGUMENT"], "a token of another entity's events");
  });

  s("SetActiveVersion with expected_active_version_id: set when it matches, refused with the current active version when not", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const e = newEntityId();
    const v1 = (await push({ rest: owner }, e)).confirm!.body.version;
    const v2 = (await push({ rest: owner }, e, { base: v1.id })).confirm!.body.version;
    // "" expects no active version.
    const none = await owner.put(`${v(e)}/active-version`, { versionId: v2.id, expected_active_version_id: v1.id });
    assert.equal([none.status, none.body.code, none.body.current_active_version], [409, "ACTIVE_VERSION_CHANGED", null]);
    assert.match(none.body.error, "is none, not the expected");
    const first = await owner.put(`${v(e)}/active-version`, { versionId: v1.id, expectedActiveVersionId: "" });
    assert.equal([first.status, first.body.id, first.body.is_active], [200, v1.id, true]);
    const refused = await owner.put(`${v(e)}/active-version`, { versionId: v2.id, expected_active_version_id: "" });
    assert.equal([refused.status, refused.body.code], [409, "ACTIVE_VERSION_CHANGED"]);
    assert.equal(refused.body.current_active_version, { id: v1.id, version: v1.version, published_by: "owner", created_at: v1.created_at });
    const set = await owner.put(`${v(e)}/active-version`, { versionId: v2.id, expected_active_version_id: v1.id });
    assert.equal([set.status, set.body.id], [200, v2.id]);
    // The same call again, as a client retries one whose answer was lost:
    // its own change is not another's, and nothing more is recorded.
    const eventsBefore = (await allEvents(owner, e)).length;
    const retried = await owner.put(`${v(e)}/active-version`, { versionId: v2.id, expected_active_version_id: v1.id });
    assert.equal([retried.status, retried.body.id, retried.body.is_active], [200, v2.id, true], JSON.stringify(retried.body));
    assert.is((await allEvents(owner, e)).length, eventsBefore, "a retry records no event");
    // Stale now: v2 is active.
    const stale = await owner.put(`${v(e)}/active-version`, { versionId: v1.id, expected_active_version_id: v1.id });
    assert.equal([stale.status, stale.body.code, stale.body.current_active_version.id], [409, "ACTIVE_VERSION_CHANGED", v2.id]);
    const bad = await owner.put(`${v(e)}/active-version`, { versionId: v1.id, expected_active_version_id: "not a version id" });
    assert.equal([bad.status, bad.body.code], [400, "INVALID_ARGUMENT"]);
    assert.match(bad.body.error, "expected_active_version_id");
    // Without it, as before.
    assert.equal((await owner.put(`${v(e)}/active-version`, { versionId: v1.id })).body.id, v1.id);
    // gRPC: ABORTED, with the current active version as the ActiveVersionChanged detail.
    const viaGrpc = await svc.grpcAs(bearer(await token({ sub: "owner", roles: ["publisher"] }))).call("SetActiveVersion", {
      entity_id: e,
      version_id: v2.id,
      expected_active_version_id: v2.id,
    });
    assert.ok(!viaGrpc.ok);
    assert.equal([viaGrpc.error.code, viaGrpc.error.reason, viaGrpc.error.activeVersionChanged?.currentActiveVersion?.id], [grpc.status.ABORTED, "ACTIVE_VERSION_CHANGED", v1.id]);
    assert.equal(viaGrpc.error.metadata, { entity_id: e, expected: v2.id, actual: v1.id });
  });

  s("racing activations that expect the same version: exactly one wins, the others learn which", async ({ svc }) => {
    const owner = await as(svc, "owner", ["publisher"]);
    const e = newEntityId();
    const v1 = (await push({ rest: owner }, e, { setAsActive: true })).confirm!.body.version.id as string;
    const targets: string[] = [];
    let base = v1;
    for (let i = 0; i < 6; i++) targets.push((base = (await push({ rest: owner }, e, { base })).confirm!.body.version.id));
    const before = (await allEvents(owner, e)).length;
    const ownerGrpc = svc.grpcAs(bearer(await token({ sub: "owner", roles: ["publisher"] })));
    const results = await Promise.all(
      targets.map((t, i) =>
        i % 2 === 0
          ? owner.put(`${v(e)}/active-version`, { versionId: t, expected_active_version_id: v1 })
          : ownerGrpc.call("SetActiveVersion", { entity_id: e, version_id: t, expected_active_version_id: v1 }),
      ),
    );
    const won = results.flatMap((r, i) => (("status" in r ? r.status === 200 : r.ok) ? [targets[i]!] : []));
    assert.is(won.length, 1, JSON.stringify(results.map((r) => ("status" in r ? r.body.code ?? r.status : r.ok || r.error.reason))));
    for (const r of results) {
      if ("status" in r && r.status !== 200) assert.equal([r.status, r.body.code, r.body.current_active_version.id], [409, "ACTIVE_VERSION_CHANGED", won[0]]);
      if (!("status" in r) && !r.ok) assert.equal([r.error.reason, r.error.activeVersionChanged?.currentActiveVersion?.id], ["ACTIVE_VERSION_CHANGED", won[0]]);
    }
    assert.is((await owner.get(`${v(e)}/active-version`)).body.id, won[0]);
    const events = await allEvents(owner, e);
    assert.equal(events.slice(0, events.length - before), [`${before + 1} ACTIVE_VERSION_CHANGED owner ${won[0]} ${v1}`], "one activation recorded");
  });

  s("confirms recorded together (MySQL's confirm groups) record each one's events as alone", async ({ svc }) => {
    const grouped = async () => Number(/^entity_versions_db_confirms_grouped_total (\d+)/m.exec(await (await fetch(`${svc.url}/metrics`)).text())?.[1] ?? 0);
    const groupedBefore = await grouped();
    const owner = await as(svc, "owner", ["publisher"]);
    const entities = Array.from({ length: 8 }, () => newEntityId("grp"));
    const uploads = await Promise.all(entities.map((e) => uploadOnly({ rest: owner }, e)));
    const confirms = await Promise.all(
      uploads.map((u, i) =>
        owner.post(`${v(entities[i]!)}/versions/confirm`, {
          storage_path: u.res.body.storage_path,
          version: u.version,
          source_hash: u.sourceHash,
          file_size_bytes: Buffer.byteLength(u.content),
          set_as_active: i % 2 === 0,
        }),
      ),
    );
    for (const [i, c] of confirms.entries()) {
      assert.is(c.status, 201, JSON.stringify(c.body));
      const id = c.body.version.id;
      const expected = [`1 ACCESS_CHANGED owner PUBLISHER_ADDED owner`, `2 VERSION_CREATED owner ${id} -`, ...(i % 2 === 0 ? [`3 ACTIVE_VERSION_CHANGED owner ${id} -`] : [])];
      assert.equal(await allEvents(owner, entities[i]!), expected.reverse());
    }
    if (backend === "mysql") assert.ok((await grouped()) > groupedBefore, "no confirm was recorded in a group: the test did not test groups");
  });

  return s;
}

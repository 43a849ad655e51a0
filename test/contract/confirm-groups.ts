import { randomUUID } from "node:crypto";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import type { Caller } from "../../src/auth/caller.js";
import { decidePushAccess, type Decision } from "../../src/auth/policy.js";
import { type Database, openDatabase } from "../../src/store/database.js";
import { migrateLatest } from "../../src/store/migrate.js";
import { type ConfirmOutcome, type NewVersion, type VersionRecord, VersionStore } from "../../src/store/version-store.js";
import { type Backend, createTestDatabase, type TestDatabase } from "../support/env.js";
import { PrivateMariaDb } from "../support/private-mariadb.js";
import { newEntityId, newSourceHash, nextVersionString } from "../support/service.js";

interface Context {
  testDb: TestDatabase;
  db: Database;
  store: VersionStore;
  /** Each group the store sent: its size and how many it recorded. */
  groups: Array<[number, number]>;
}

const publisher: Caller = { id: "pub-1", roles: ["publisher"], orgs: [] };

/** The store's MySQL database, grouping up to 16 confirms. */
function openMysql(url: string): Database {
  return openDatabase({
    kind: "mysql",
    url,
    poolMax: 10,
    // Long, so that a group waiting on a held lock would be seen
    // waiting, not rescued by the lock-wait timeout.
    lockWaitTimeoutSeconds: 30,
    statementTimeoutMs: 30_000,
    acquireTimeoutMs: 5_000,
    readBatchMax: 16,
    confirmGroupMax: 16,
    preparedStatements: true,
  });
}

/**
 * Concurrent confirms straight on the store, where a group can meet every
 * case a pre-check cannot rule out (a base gone stale, a taken version
 * string, an upload already used, an entity another transaction holds).
 * On MySQL they are grouped; on SQLite each goes alone. Every answer and
 * every row left behind must be what the confirm would have got alone.
 */
export function confirmGroupsSuite(backend: Backend) {
  const s = suite<Context>(`${backend}: concurrency: confirms recorded together, each answered as if alone`, {} as Context);

  s.before(async (ctx) => {
    ctx.testDb = await createTestDatabase(backend);
    const url = ctx.testDb.url;
    ctx.db = url.startsWith("sqlite:") ? openDatabase({ kind: "sqlite", file: url.slice("sqlite:".length) }) : openMysql(url);
    await migrateLatest(ctx.db.knex);
    ctx.groups = [];
    ctx.store = new VersionStore(ctx.db, { onConfirmGroup: (size, recorded) => ctx.groups.push([size, recorded]) });
  });

  s.after(async (ctx) => {
    await ctx.db?.knex.destroy();
    await ctx.testDb?.drop();
  });

  /** A confirm's input, with an issued upload of its own unless one is given. */
  async function input(ctx: Context, entityId: string, o: Partial<NewVersion> & { decision?: Decision } = {}): Promise<NewVersion> {
    const uploadId = o.uploadId ?? randomUUID();
    if (o.uploadId === undefined) await ctx.store.recordUpload(entityId, uploadId, "owner", new Date(), 1000);
    const { decision, ...rest } = o;
    return {
      id: randomUUID(),
      entityId,
      version: nextVersionString(),
      sourceHash: newSourceHash(),
      uploadId,
      storagePath: `${entityId}/${uploadId}/package.tgz`,
      fileSizeBytes: 10,
      packageMd5: undefined,
      packageLockPath: undefined,
      mayCreate: true,
      serviceDependencies: ["svc-a"],
      packageJson: { name: "x" },
      baseVersionId: "",
      caller: publisher,
      authorize: (facts, hasVersions) => decision ?? decidePushAccess(publisher, facts, hasVersions),
      setAsActive: false,
      force: false,
      now: new Date(Math.floor(Date.now() / 1000) * 1000),
      ...rest,
    };
  }

  /** An entity with one version, confirmed alone. */
  async function seeded(ctx: Context): Promise<{ entityId: string; v1: NewVersion }> {
    const entityId = newEntityId("grp");
    const v1 = await input(ctx, entityId, { setAsActive: true });
    const outcome = await ctx.store.confirm(v1);
    assert.is(outcome.kind, "created");
    return { entityId, v1 };
  }

  const created = (o: ConfirmOutcome): VersionRecord => {
    if (o.kind !== "created") throw new assert.Assertion({ message: `expected created, got ${JSON.stringify(o)}`, operator: "created", expects: "created", actual: o.kind });
    return o.version;
  };

  s("plain creations are recorded together; stale, refused, taken and duplicate ones are answered as alone, and leave nothing", async (ctx) => {
    const old = await seeded(ctx);
    const stale = await seeded(ctx);
    const taken = await seeded(ctx);
    const dup = await seeded(ctx);
    const dupForced = await seeded(ctx);
    const fresh = newEntityId("grp-new");
    const refused = newEntityId("grp-refused");
    const inputs = {
      fresh: await input(ctx, fresh, { entityExisted: false }),
      old: await input(ctx, old.entityId, { entityExisted: true, baseVersionId: old.v1.id, setAsActive: true }),
      stale: await input(ctx, stale.entityId, { entityExisted: true, baseVersionId: "not-the-tip" }),
      refused: await input(ctx, refused, { entityExisted: false, decision: "forbidden" }),
      taken: await input(ctx, taken.entityId, { entityExisted: true, baseVersionId: taken.v1.id, version: taken.v1.version }),
      dup: await input(ctx, dup.entityId, { entityExisted: true, baseVersionId: dup.v1.id, sourceHash: dup.v1.sourceHash }),
      dupForced: await input(ctx, dupForced.entityId, { entityExisted: true, baseVersionId: dupForced.v1.id, sourceHash: dupForced.v1.sourceHash, force: true }),
    };
    ctx.groups.length = 0;
    const names = Object.keys(inputs) as Array<keyof typeof inputs>;
    const outcomes = Object.fromEntries((await Promise.all(names.map((n) => ctx.store.confirm(inputs[n])))).map((o, i) => [names[i]!, o])) as Record<keyof typeof inputs, ConfirmOutcome>;

    if (backend === "mysql") assert.equal(ctx.groups, [[7, 3]], "one group of seven, which recorded the three plain creations");
    else assert.equal(ctx.groups, [], "SQLite records each alone");

    // The creations, as read back.
    for (const n of ["fresh", "old", "dupForced"] as const) {
      const version = created(outcomes[n]);
      const read = await ctx.store.getVersionWithFacts(inputs[n].entityId, version.id, publisher);
      assert.equal(read.kind === "found" ? read.version : read.kind, version, `${n} reads back as answered`);
    }
    assert.is(created(outcomes.fresh).seq, 1);
    assert.is(created(outcomes.old).seq, 2);
    assert.is(created(outcomes.old).isActive, true);
    assert.is(created(outcomes.dupForced).isActive, false);
    const entity = (id: string) => ctx.db.knex("entities").where("id", id).first();
    assert.equal(await entity(fresh).then((e) => [e.tip_version_id, Number(e.last_seq), e.active_version_id]), [inputs.fresh.id, 1, null]);
    assert.equal(await entity(old.entityId).then((e) => [e.tip_version_id, Number(e.last_seq), e.active_version_id]), [inputs.old.id, 2, inputs.old.id]);
    assert.equal(await entity(dupForced.entityId).then((e) => [e.tip_version_id, e.active_version_id]), [inputs.dupForced.id, dupForced.v1.id]);
    assert.equal(await ctx.db.knex("entity_publishers").where("entity_id", fresh).pluck("user_id"), [publisher.id], "the first push claimed the entity");

    // The rest, answered as alone, with nothing written.
    const staleTip = await ctx.store.getVersionWithFacts(stale.entityId, stale.v1.id, publisher);
    assert.equal(outcomes.stale, { kind: "stale", tip: staleTip.kind === "found" ? staleTip.version : undefined });
    assert.equal(outcomes.refused, { kind: "refused", decision: "forbidden" });
    assert.is(await entity(refused), undefined, "a refused first push leaves no entity row");
    assert.is(outcomes.taken.kind, "version-taken");
    assert.is(outcomes.taken.kind === "version-taken" ? outcomes.taken.existing.id : undefined, taken.v1.id);
    assert.is(outcomes.dup.kind, "existing");
    assert.is(outcomes.dup.kind === "existing" ? outcomes.dup.version.id : undefined, dup.v1.id);
    const states = await ctx.db.knex("uploads").whereIn("id", names.map((n) => inputs[n].uploadId)).select("id", "state");
    const stateOf = (n: keyof typeof inputs) => states.find((r: { id: string }) => r.id === inputs[n].uploadId)?.state;
    assert.equal(names.map((n) => [n, stateOf(n)]), names.map((n) => [n, ["fresh", "old", "dupForced"].includes(n) ? "confirmed" : "issued"]));
    for (const [n, e] of [["stale", stale], ["taken", taken], ["dup", dup]] as const) {
      assert.equal(await entity(e.entityId).then((r) => [r.tip_version_id, Number(r.last_seq)]), [e.v1.id, 1], `${n} left its entity as it was`);
    }
  });

  s("an upload that already produced a version is answered that version, never claimed again; the others are recorded together", async (ctx) => {
    const used = await seeded(ctx);
    const inputs = [
      await input(ctx, newEntityId("grp-a"), { entityExisted: false }),
      await input(ctx, used.entityId, {
        entityExisted: true,
        baseVersionId: used.v1.id,
        uploadId: used.v1.uploadId,
        // The same push again (a retry): another would be refused, upload-used.
        version: used.v1.version,
        sourceHash: used.v1.sourceHash,
        fileSizeBytes: used.v1.fileSizeBytes,
      }),
      await input(ctx, newEntityId("grp-b"), { entityExisted: false }),
    ];
    ctx.groups.length = 0;
    const outcomes = await Promise.all(inputs.map((i) => ctx.store.confirm(i)));
    if (backend === "mysql") assert.equal(ctx.groups, [[3, 2]]);
    assert.is(created(outcomes[0]!).seq, 1);
    assert.equal(outcomes[1]!.kind === "existing" ? [outcomes[1]!.reason, outcomes[1]!.version.id] : outcomes[1], ["retry", inputs[1]!.uploadId === used.v1.uploadId ? used.v1.id : ""]);
    assert.is(created(outcomes[2]!).seq, 1);
    assert.is(Number((await ctx.db.knex("entities").where("id", used.entityId).first()).last_seq), 1);
  });

  s("an upload swept by the sweeper or of another entity is never claimed by a group: it is answered as alone", async (ctx) => {
    for (const bad of ["swept", "another entity's"] as const) {
      const entityId = newEntityId("grp-bad");
      const uploadId = randomUUID();
      await ctx.store.recordUpload(bad === "swept" ? entityId : newEntityId("grp-owner"), uploadId, "owner", new Date(), 1000);
      if (bad === "swept") await ctx.db.knex("uploads").where("id", uploadId).update({ state: "deleting" });
      const good = await input(ctx, newEntityId("grp-good"), { entityExisted: false });
      const inputs = [good, await input(ctx, entityId, { entityExisted: false, uploadId })];
      ctx.groups.length = 0;
      const outcomes = await Promise.all(inputs.map((i) => ctx.store.confirm(i)));
      if (backend === "mysql") assert.equal(ctx.groups, [[2, 1]], `${bad}: the group recorded only the good one`);
      assert.is(created(outcomes[0]!).seq, 1);
      assert.equal(outcomes[1], { kind: "upload-missing" }, bad);
      assert.is(await ctx.db.knex("entities").where("id", entityId).first(), undefined, `${bad}: no entity row left`);
      assert.is(await ctx.db.knex("versions").where("upload_id", uploadId).first(), undefined, `${bad}: no version points at it`);
    }
  });

  s("two first pushes of one new entity in one turn: the second waits for the first's group, then is stale", async (ctx) => {
    const w = newEntityId("grp-w");
    const inputs = [
      await input(ctx, w, { entityExisted: false }),
      await input(ctx, newEntityId("grp-z"), { entityExisted: false }),
      await input(ctx, w, { entityExisted: false }),
    ];
    ctx.groups.length = 0;
    const outcomes = await Promise.all(inputs.map((i) => ctx.store.confirm(i)));
    if (backend === "mysql") assert.equal(ctx.groups, [[2, 2]], "one group of the first push of each entity, which recorded both");
    assert.is(created(outcomes[0]!).seq, 1);
    assert.is(created(outcomes[1]!).seq, 1);
    assert.is(outcomes[2]!.kind === "stale" ? outcomes[2].tip?.id : outcomes[2]!.kind, inputs[0]!.id);
  });

  s("a confirm held behind another on its entity: stale when that one moved the tip, created when it builds on it", async (ctx) => {
    const e = await seeded(ctx);
    const first = await input(ctx, e.entityId, { entityExisted: true, baseVersionId: e.v1.id });
    const racer = await input(ctx, e.entityId, { entityExisted: true, baseVersionId: e.v1.id });
    const next = await input(ctx, e.entityId, { entityExisted: true, baseVersionId: first.id });
    const dupOfFirst = await input(ctx, e.entityId, { entityExisted: true, baseVersionId: e.v1.id, sourceHash: first.sourceHash });
    const outcomes = await Promise.all([first, racer, next, dupOfFirst].map((i) => ctx.store.confirm(i)));
    assert.is(created(outcomes[0]!).seq, 2);
    assert.is(outcomes[1]!.kind === "stale" ? outcomes[1].tip?.id : outcomes[1]!.kind, first.id, "the racer is stale, shown the first as the tip");
    assert.is(outcomes[2]!.kind === "created" ? outcomes[2].version.seq : outcomes[2]!.kind, 3, "the one built on the first is created after it");
    assert.is(outcomes[3]!.kind === "existing" ? outcomes[3].version.id : outcomes[3]!.kind, first.id, "the duplicate of the first answers it, before any base check");
  });

  /**
   * The sweeper's claim of an abandoned upload (issued → deleting),
   * committed while a group holds its entities' locks and has read that
   * upload as issued, its own claim waiting on the sweeper's row: the group
   * must claim fewer than all and roll back, and that confirm, decided
   * alone, find the upload gone (upload-missing, UPLOAD_NOT_FOUND), never
   * record a version on an upload being deleted; the other one is recorded.
   */
  async function sweptWhileGrouped(ctx: Context): Promise<void> {
    const knex = ctx.db.knex;
    const swept = await seeded(ctx);
    const other = await seeded(ctx);
    const inputs = [
      await input(ctx, swept.entityId, { entityExisted: true, baseVersionId: swept.v1.id }),
      await input(ctx, other.entityId, { entityExisted: true, baseVersionId: other.v1.id }),
    ];
    const sweeper = await knex.transaction();
    try {
      assert.is(await sweeper("uploads").where({ entity_id: swept.entityId, id: inputs[0]!.uploadId, state: "issued" }).update({ state: "deleting" }), 1);
      ctx.groups.length = 0;
      const answers = inputs.map((i) => ctx.store.confirm(i));
      // The group's claim (one statement for all its uploads), waiting on
      // the sweeper's row; this database's own sessions only, as the server
      // may be shared with other test runs.
      const deadline = Date.now() + 10_000;
      for (;;) {
        const [rows] = (await knex.raw(
          "select info from information_schema.processlist where db = database() and info like 'update uploads force index (primary) set state = ''confirmed''%'",
        )) as [unknown[]];
        if (rows.length > 0) break;
        if (Date.now() > deadline) assert.unreachable("the group's claim never waited on the sweeper's row");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await sweeper.commit();
      const [sweptOutcome, otherOutcome] = await Promise.all(answers);
      assert.equal(sweptOutcome, { kind: "upload-missing" });
      assert.equal(ctx.groups, [[2, 0]], "the group recorded nothing");
      assert.is(created(otherOutcome!).seq, 2, "the other confirm, decided alone, is recorded");
      assert.is(await knex("versions").where("upload_id", inputs[0]!.uploadId).first(), undefined, "no version points at the swept upload");
      assert.is((await knex("uploads").where("id", inputs[0]!.uploadId).first()).state, "deleting", "the upload stays the deleter's");
      assert.equal(await knex("entities").where("id", swept.entityId).first().then((e) => [e.tip_version_id, Number(e.last_seq)]), [swept.v1.id, 1]);
    } finally {
      if (!sweeper.isCompleted()) await sweeper.rollback();
    }
  }

  if (backend === "mysql") {
    /** A test that needs a MariaDB server of its own: where the machine has none, left out and named in the run's report (test/contract/index.ts). */
    const withPrivateMariaDb = (name: string, test: (ctx: Context) => Promise<void>) =>
      PrivateMariaDb.available() ? s(name, test) : PrivateMariaDb.leaveOut(`${backend}: confirm-groups: ${name}`);

    // Not on SQLite: there confirms are not grouped.
    s("a group whose upload the sweeper abandons meanwhile records nothing: that confirm answers upload-missing alone (the suite's own database, snapshot isolation off as on MySQL 8)", async (ctx) => {
      await sweptWhileGrouped(ctx);
    });

    withPrivateMariaDb("a group whose upload the sweeper abandons meanwhile records nothing on a MariaDB with snapshot isolation (11.6's default)", async () => {
      const mariadb = await PrivateMariaDb.start(["--innodb-snapshot-isolation=ON"]);
      const db = openMysql(mariadb.url());
      try {
        await migrateLatest(db.knex);
        const groups: Array<[number, number]> = [];
        const store = new VersionStore(db, { onConfirmGroup: (size, recorded) => groups.push([size, recorded]) });
        await sweptWhileGrouped({ testDb: undefined as never, db, store, groups });
      } finally {
        await db.knex.destroy();
        await mariadb.destroy();
      }
    });

    s("an entity another transaction holds never makes the group wait: its confirm goes alone, after the lock", async (ctx) => {
      const held = await seeded(ctx);
      const other = await seeded(ctx);
      const inputs = [
        await input(ctx, held.entityId, { entityExisted: true, baseVersionId: held.v1.id }),
        await input(ctx, other.entityId, { entityExisted: true, baseVersionId: other.v1.id }),
        await input(ctx, newEntityId("grp-c"), { entityExisted: false }),
      ];
      const holder = await ctx.db.knex.transaction();
      try {
        await holder("entities").where("id", held.entityId).forUpdate().first();
        ctx.groups.length = 0;
        const [heldOutcome, ...rest] = inputs.map((i) => ctx.store.confirm(i));
        let heldAnswered = false;
        void heldOutcome!.finally(() => (heldAnswered = true));
        // Far below the 30 s lock wait: a group that waited for the lock
        // would not answer in time.
        const others = await Promise.race([Promise.all(rest), new Promise<undefined>((r) => setTimeout(() => r(undefined), 4_000))]);
        assert.ok(others !== undefined, "the other confirms were answered while the lock was held");
        for (const o of others) created(o);
        assert.is(heldAnswered, false, "the held entity's confirm waits for its lock");
        assert.equal(ctx.groups, [[3, 2]]);
        await holder.commit();
        assert.is(created(await heldOutcome!).seq, 2);
      } finally {
        if (!holder.isCompleted()) await holder.rollback();
      }
    });

    s("a group never commits a confirm after its deadline: it rolls back, and the others are recorded alone", async (ctx) => {
      const entities = [await seeded(ctx), await seeded(ctx), await seeded(ctx)];
      const inputs = await Promise.all(entities.map((e) => input(ctx, e.entityId, { entityExisted: true, baseVersionId: e.v1.id })));
      const late = { ...inputs[0]!, signal: AbortSignal.timeout(300) };
      // Holds the uploads the group claims, so it is still running at the deadline.
      const holder = await ctx.db.knex.transaction();
      try {
        await holder("uploads").whereIn("id", inputs.map((i) => i.uploadId)).forUpdate();
        ctx.groups.length = 0;
        const answers = [late, inputs[1]!, inputs[2]!].map((i) => ctx.store.confirm(i).then((o) => o, (error: unknown) => error));
        const first = await answers[0];
        assert.ok(!(typeof first === "object" && first !== null && "kind" in first), `the late confirm is refused at its deadline: ${JSON.stringify(first)}`);
        await new Promise((resolve) => setTimeout(resolve, 300));
        await holder.commit();
        for (const answer of answers.slice(1)) created((await answer) as ConfirmOutcome);
        assert.equal(ctx.groups, [[3, 0]], "the group recorded nothing");
        // The group's transaction has ended by now (the others' locks came after it).
        assert.is(await ctx.db.knex("versions").where({ entity_id: late.entityId, id: late.id }).first(), undefined, "the late confirm was never recorded");
        assert.is((await ctx.db.knex("entities").where({ id: late.entityId }).first()).tip_version_id, entities[0]!.v1.id);
      } finally {
        if (!holder.isCompleted()) await holder.rollback();
      }
    });
  }

  return s;
}

// The push decision's whole table: named cases, then rules that must hold
// over every combination of facts and intent.
import { test } from "uvu";
import * as assert from "uvu/assert";
import type { Decision } from "../../src/auth/policy.js";
import { decidePush, type PushFacts, type PushIntent } from "../../src/domain/push-decision.js";

type V = { id: string; isActive: boolean; version: string; sourceHash: string; fileSizeBytes: number };
/** A version of the push `intent()` describes, unless told otherwise. */
const v = (id: string, isActive = false, push: Partial<Pick<V, "version" | "sourceHash" | "fileSizeBytes">> = {}): V => ({
  id,
  isActive,
  version: "2026.01.01-000000",
  sourceHash: "a".repeat(64),
  fileSizeBytes: 10,
  ...push,
});
const facts = (over: Partial<PushFacts<V>> = {}): PushFacts<V> => ({
  access: "allow",
  tipVersionId: "tip",
  duplicate: undefined,
  versionTaken: undefined,
  uploadVersion: undefined,
  uploadIssued: true,
  uploadActivatedId: undefined,
  ...over,
});
const intent = (over: Partial<PushIntent> = {}): PushIntent => ({
  step: "confirm",
  baseVersionId: "tip",
  force: false,
  setAsActive: false,
  version: "2026.01.01-000000",
  sourceHash: "a".repeat(64),
  fileSizeBytes: 10,
  ...over,
});

test("named cases", () => {
  const cases: Array<[string, PushFacts<V>, PushIntent, unknown]> = [
    ["a first push needs no base, and claims the entity", facts({ access: "claim", tipVersionId: undefined }), intent({ baseVersionId: "" }), { kind: "create", claim: true }],
    ["a base named on an entity with no versions is stale", facts({ tipVersionId: undefined }), intent({ baseVersionId: "x" }), { kind: "stale" }],
    ["the tip as base creates", facts(), intent(), { kind: "create", claim: false }],
    ["no base once the entity has versions is stale", facts(), intent({ baseVersionId: "" }), { kind: "stale" }],
    ["a stale base is stale even with force", facts(), intent({ baseVersionId: "old", force: true }), { kind: "stale" }],
    ["published source answers the existing version, even from a stale base", facts({ duplicate: v("d") }), intent({ baseVersionId: "old" }), { kind: "existing", version: v("d"), reason: "duplicate", activate: false }],
    ["force skips deduplication but not push protection", facts({ duplicate: v("d") }), intent({ force: true }), { kind: "create", claim: false }],
    ["deduplication with set_as_active activates the existing version", facts({ duplicate: v("d") }), intent({ setAsActive: true }), { kind: "existing", version: v("d"), reason: "duplicate", activate: true }],
    ["the retry of a confirm answered with a duplicate it made active activates nothing: a later activation stays", facts({ duplicate: v("d"), uploadActivatedId: "d" }), intent({ setAsActive: true }), { kind: "existing", version: v("d"), reason: "duplicate", activate: false }],
    ["… nor a newer duplicate than the one it made active: an upload activates once", facts({ duplicate: v("d2"), uploadActivatedId: "d", uploadIssued: false }), intent({ setAsActive: true }), { kind: "existing", version: v("d2"), reason: "duplicate", activate: false }],
    ["… and once that duplicate is deleted, its used upload creates nothing", facts({ uploadActivatedId: "d", uploadIssued: false }), intent({ setAsActive: true }), { kind: "upload-missing" }],
    ["… nor one recorded so while still issued (before such uploads were marked used)", facts({ uploadActivatedId: "d" }), intent(), { kind: "upload-missing" }],
    ["a duplicate a confirm would activate needs its upload issued, to record the activation on", facts({ duplicate: v("d"), uploadIssued: false }), intent({ setAsActive: true }), { kind: "upload-missing" }],
    ["… one it would not activate is answered without it", facts({ duplicate: v("d"), uploadIssued: false }), intent(), { kind: "existing", version: v("d"), reason: "duplicate", activate: false }],
    ["an existing version already active is not activated again", facts({ duplicate: v("d", true) }), intent({ setAsActive: true }), { kind: "existing", version: v("d", true), reason: "duplicate", activate: false }],
    ["a reused upload answers its version, whatever force and the base say", facts({ uploadVersion: v("u"), tipVersionId: "newer" }), intent({ baseVersionId: "tip", force: true }), { kind: "existing", version: v("u"), reason: "retry", activate: false }],
    ["a retried confirm with set_as_active changes nothing: a later activation stays", facts({ uploadVersion: v("u") }), intent({ setAsActive: true }), { kind: "existing", version: v("u"), reason: "retry", activate: false }],
    ["a confirm of a used upload naming another source hash is refused, not answered the other push's version", facts({ uploadVersion: v("u", false, { sourceHash: "b".repeat(64) }) }), intent(), { kind: "upload-used", existing: v("u", false, { sourceHash: "b".repeat(64) }) }],
    ["… another version string", facts({ uploadVersion: v("u", false, { version: "2026.01.01-000001" }) }), intent({ force: true }), { kind: "upload-used", existing: v("u", false, { version: "2026.01.01-000001" }) }],
    ["… another size, with force", facts({ uploadVersion: v("u", false, { fileSizeBytes: 11 }) }), intent({ baseVersionId: "old", force: true }), { kind: "upload-used", existing: v("u", false, { fileSizeBytes: 11 }) }],
    ["the same source without force, another version string or size: answered the newest version of it, as deduplication (spec 4.2 rule 2)", facts({ uploadVersion: v("u", false, { version: "2026.01.01-000001", fileSizeBytes: 11 }), duplicate: v("d") }), intent({ baseVersionId: "old" }), { kind: "existing", version: v("d"), reason: "duplicate", activate: false }],
    ["… but asking to activate it, which the used upload cannot record: refused", facts({ uploadVersion: v("u", false, { version: "2026.01.01-000001" }), duplicate: v("d") }), intent({ setAsActive: true }), { kind: "upload-used", existing: v("u", false, { version: "2026.01.01-000001" }) }],
    ["… unless it is active already", facts({ uploadVersion: v("u", false, { version: "2026.01.01-000001" }), duplicate: v("d", true) }), intent({ setAsActive: true }), { kind: "existing", version: v("d", true), reason: "duplicate", activate: false }],
    ["the retry is answered before deduplication", facts({ uploadVersion: v("u"), duplicate: v("d") }), intent(), { kind: "existing", version: v("u"), reason: "retry", activate: false }],
    ["upload-url has no upload: an upload version is not looked at", facts({ uploadVersion: v("u"), uploadIssued: false }), intent({ step: "upload-url" }), { kind: "create", claim: false }],
    ["upload-url never activates", facts({ duplicate: v("d") }), intent({ step: "upload-url", setAsActive: true }), { kind: "existing", version: v("d"), reason: "duplicate", activate: false }],
    ["a taken version string", facts({ versionTaken: v("t") }), intent(), { kind: "version-taken", existing: v("t") }],
    ["push protection before the version string", facts({ versionTaken: v("t") }), intent({ baseVersionId: "old" }), { kind: "stale" }],
    ["a swept or unknown upload", facts({ uploadIssued: false }), intent(), { kind: "upload-missing" }],
    ["a stale push learns STALE_BASE before any upload problem", facts({ uploadIssued: false }), intent({ baseVersionId: "old" }), { kind: "stale" }],
    ["no access: nothing else is told", facts({ access: "hidden", duplicate: v("d"), uploadVersion: v("u") }), intent(), { kind: "refused", decision: "hidden" }],
    ["a reader may not push", facts({ access: "forbidden" }), intent(), { kind: "refused", decision: "forbidden" }],
  ];
  for (const [name, f, i, expected] of cases) assert.equal(decidePush(f, i), expected, name);
});

test("rules that hold over every combination", () => {
  const accesses: Decision[] = ["allow", "claim", "hidden", "forbidden"];
  const versions = [undefined, v("a"), v("b", true)];
  const uploadVersions = [...versions, v("other-push", false, { sourceHash: "c".repeat(64) }), v("same-source", false, { version: "2026.01.01-000009", fileSizeBytes: 99 })];
  let n = 0;
  for (const access of accesses)
    for (const step of ["upload-url", "confirm"] as const)
      for (const uploadVersion of uploadVersions)
        for (const duplicate of versions)
          for (const tipVersionId of [undefined, "tip"])
            for (const baseVersionId of ["", "tip", "other"])
              for (const versionTaken of [undefined, v("t")])
                for (const uploadIssued of [false, true])
                  for (const force of [false, true])
                    for (const setAsActive of [false, true])
                      for (const uploadActivatedId of [undefined, "a", "b"]) {
                        n++;
                        const f = facts({ access, tipVersionId, duplicate, versionTaken, uploadVersion, uploadIssued, uploadActivatedId });
                        const i = intent({ step, baseVersionId, force, setAsActive });
                        const o = decidePush(f, i);
                        const label = JSON.stringify({ f, i, o });
                        const refused = access === "hidden" || access === "forbidden";
                        assert.is(o.kind === "refused", refused, `refused exactly without access: ${label}`);
                        if (refused) continue;
                        const fresh = tipVersionId === undefined ? baseVersionId === "" : baseVersionId === tipVersionId;
                        const used = step === "confirm" && uploadVersion !== undefined;
                        const retry = used && uploadVersion.sourceHash === i.sourceHash && uploadVersion.version === i.version && uploadVersion.fileSizeBytes === i.fileSizeBytes;
                        // The same source without force: deduplication's answer (spec 4.2 rule 2), activating nothing.
                        if (used && !retry && uploadVersion.sourceHash === i.sourceHash && !force) {
                          const answer = duplicate ?? uploadVersion;
                          if (setAsActive && !answer.isActive) assert.equal(o, { kind: "upload-used", existing: uploadVersion }, `an activation a used upload cannot record is refused: ${label}`);
                          else assert.equal(o, { kind: "existing", version: answer, reason: "duplicate", activate: false }, `answered the newest version of the source: ${label}`);
                          continue;
                        }
                        if (used && !retry) {
                          assert.is(o.kind, "upload-used", `a used upload makes no other push, whatever else holds: ${label}`);
                          continue;
                        }
                        const dedup = duplicate !== undefined && !force;
                        if (o.kind === "create") {
                          assert.ok(fresh && versionTaken === undefined && !retry && !dedup, `created only on the tip, with a free version string: ${label}`);
                          assert.ok(step === "upload-url" || (uploadIssued && uploadActivatedId === undefined), `a confirm creates only from an issued upload that activated nothing: ${label}`);
                          assert.is(o.claim, access === "claim");
                        }
                        if (o.kind === "stale") assert.ok(!fresh && !retry && !dedup, label);
                        if (!fresh && !retry && !dedup) assert.is(o.kind, "stale", `push protection is never bypassed, force or not: ${label}`);
                        if (retry) assert.ok(o.kind === "existing" && o.reason === "retry", `a retried confirm is always answered its version: ${label}`);
                        const activates = (version: V) => step === "confirm" && !retry && uploadActivatedId === undefined && setAsActive && !version.isActive;
                        if (o.kind === "existing") {
                          assert.is(o.activate, activates(o.version), `activates exactly when asked and needed, never on a retry, and an upload once: ${label}`);
                          assert.ok(!o.activate || uploadIssued, `activates only from an issued upload, which records it: ${label}`);
                        }
                        if (!retry && dedup && activates(duplicate) && !uploadIssued) assert.is(o.kind, "upload-missing", label);
                        if (o.kind === "upload-missing") assert.is(step, "confirm");
                        assert.is.not(o.kind, "upload-used", `only a confirm naming another push is refused so: ${label}`);
                      }
  assert.is(n, 4 * 2 * 5 * 3 * 2 * 3 * 2 * 2 * 2 * 2 * 3);
});

test.run();

import { test } from "uvu";
import * as assert from "uvu/assert";
import { type AccessFacts, decidePushAccess, decideRead, decideWrite, noAccess } from "../../src/auth/policy.js";
import { toAccessFacts } from "../../src/store/access-store.js";

const caller = (roles: string[] = []) => ({ id: "u", roles, orgs: [] });
const facts = (f: Partial<AccessFacts>): AccessFacts => ({ ...noAccess, hasPublishers: true, ...f });

test("read through any of spec 5's four paths, or admin; otherwise hidden", () => {
  for (const f of [{ isPublisher: true }, { isShared: true }, { inOrgStore: true }, { isPublic: true }]) {
    assert.is(decideRead(caller(), facts(f)), "allow", JSON.stringify(f));
  }
  assert.is(decideRead(caller(), facts({})), "hidden");
  assert.is(decideRead(caller(["admin"]), noAccess), "allow");
});

test("writes need the publisher role and being a publisher; readers are forbidden, others hidden", () => {
  assert.is(decideWrite(caller(["publisher"]), facts({ isPublisher: true })), "allow");
  assert.is(decideWrite(caller([]), facts({ isPublisher: true })), "forbidden");
  assert.is(decideWrite(caller(["publisher"]), facts({ isShared: true })), "forbidden");
  assert.is(decideWrite(caller(["publisher"]), facts({ isPublic: true })), "forbidden");
  assert.is(decideWrite(caller(["publisher"]), facts({})), "hidden");
  assert.is(decideWrite(caller(["admin"]), facts({})), "allow");
});

test("an unclaimed entity (no publisher, no version) is claimed by its first pusher: the publisher role or an admin", () => {
  assert.is(decidePushAccess(caller(["publisher"]), noAccess, false), "claim");
  assert.is(decidePushAccess(caller(["publisher", "admin"]), noAccess, false), "claim");
  assert.is(decidePushAccess(caller(["admin"]), noAccess, false), "claim", "an admin's first push records it as the first publisher");
  assert.is(decidePushAccess(caller([]), noAccess, false), "hidden");
  assert.is(decidePushAccess(caller(["publisher"]), facts({}), false), "hidden");
});

test("an entity with versions but no publisher is never claimable: only an admin may push to it", () => {
  assert.is(decidePushAccess(caller(["publisher"]), noAccess, true), "hidden");
  assert.is(decidePushAccess(caller(["admin"]), noAccess, true), "allow");
  assert.is(decidePushAccess(caller(["publisher"]), { ...noAccess, isShared: true }, true), "forbidden");
});

test("facts read without has_publishers (reads) can never let a push claim the entity", () => {
  const row = { is_publisher: 0, has_publishers: null, is_shared: 0, in_org_store: 0, public_store: 1 };
  assert.is(toAccessFacts(row).hasPublishers, true);
  assert.is(decidePushAccess(caller(["publisher"]), toAccessFacts(row), false), "forbidden");
  assert.is(toAccessFacts({ ...row, has_publishers: 0 }).hasPublishers, false);
  assert.is(decidePushAccess(caller(["publisher"]), toAccessFacts({ ...row, has_publishers: 0 }), false), "claim");
  assert.is(toAccessFacts(undefined).hasPublishers, false);
});

test.run();

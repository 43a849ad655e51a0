import { Code, ConnectError } from "@connectrpc/connect";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { StaleBaseSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { apiError, detail, reasonOf } from "../../src/errors/api-error.js";
import { catalog } from "../../src/errors/catalog.js";
import { renderRestError } from "../../src/rest/rest-error.js";
import { toCatalogError } from "../../src/rpc/error-interceptor.js";

const quiet = { error: () => undefined };

test("every catalog entry renders as {error, code} with its status", () => {
  for (const reason of Object.keys(catalog) as Array<keyof typeof catalog>) {
    if (reason === "STALE_BASE") continue;
    const params = { field: "f", problem: "p", entityId: "e", versionId: "v", version: "2026.01.01-000000", path: "p", expected: 1, actual: 2, method: "GET", contentType: "x", limitBytes: 1 } as never;
    const rendered = renderRestError(apiError(reason, params));
    assert.is(rendered.status, catalog[reason].httpStatus, reason);
    assert.equal(Object.keys(rendered.body).sort(), ["code", "error"], reason);
    assert.is(rendered.body["code"], reason);
    assert.ok(String(rendered.body["error"]).length > 10, reason);
    assert.is(rendered.headers["retry-after"] !== undefined, catalog[reason].retryable === true, reason);
  }
});

test("a body too large and a token from another issuer say what to do", () => {
  const tooLarge = catalog.REQUEST_TOO_LARGE.message({ limitBytes: 1048576 });
  assert.match(tooLarge, "larger than 1048576 bytes");
  assert.match(tooLarge, "MAX_REQUEST_BYTES");
  assert.match(tooLarge, "send a smaller one");
  assert.match(catalog.TOKEN_WRONG_ISSUER.message({}), "get a token from the issuer it trusts");
});

test("STALE_BASE carries latest_version, null when the entity has no versions", () => {
  const none = renderRestError(apiError("STALE_BASE", { baseVersionId: "b", tipVersionId: undefined }, { details: [detail(StaleBaseSchema, {})] }));
  assert.equal(none.body, { error: none.body["error"]!, code: "STALE_BASE", latest_version: null });
  assert.is(none.status, 409);
});

test("unexpected errors leave as INTERNAL without their message; outages as UNAVAILABLE", () => {
  const internal = toCatalogError(new Error("SELECT secret FROM somewhere failed"), quiet, "X");
  assert.is(reasonOf(internal), "INTERNAL");
  assert.not.match(internal.message, "secret");
  const down = toCatalogError(Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:3306"), { code: "ECONNREFUSED" }), quiet, "X");
  assert.is(reasonOf(down), "DATABASE_UNAVAILABLE");
  assert.is(down.code, Code.Unavailable);
  assert.not.match(down.message, "10.0.0.1");
  const deadlock = toCatalogError(Object.assign(new Error("Deadlock found"), { code: "ER_LOCK_DEADLOCK" }), quiet, "X");
  assert.is(reasonOf(deadlock), "DATABASE_BUSY");
  const connect = new ConnectError("deadline", Code.DeadlineExceeded);
  assert.is(toCatalogError(connect, quiet, "X"), connect);
});

test.run();

import { suite } from "uvu";
import * as assert from "uvu/assert";
import { BlobStoreUnavailableError } from "../../src/blob/blob-store.js";
import { messageWithCauses, startupHint } from "../../src/ops/startup-hint.js";

const s = suite("start-up hints: an error that stops the start says what to do");
const settings = { host: "127.0.0.1", port: 8080, databaseName: "versions" };
const failure = (code: string) => Object.assign(new Error(code), { code });

s("each known cause gets its fix, naming the setting", () => {
  assert.match(startupHint(failure("EADDRINUSE"), settings), "another process listens on 127.0.0.1:8080: stop it, or set PORT to a free port");
  assert.match(startupHint(failure("EACCES"), { ...settings, port: 80 }), "set PORT to 1024 or above");
  assert.match(startupHint(failure("EADDRNOTAVAIL"), settings), "set HOST");
  assert.match(startupHint(failure("ER_BAD_DB_ERROR"), settings), "CREATE DATABASE `versions`");
  assert.match(startupHint(failure("ER_ACCESS_DENIED_ERROR"), settings), "user and password in DATABASE_URL");
  assert.match(startupHint(failure("ER_ACCESS_DENIED_NO_PASSWORD_ERROR"), settings), "user and password in DATABASE_URL");
  assert.match(startupHint(Object.assign(failure("ENOTFOUND"), { hostname: settings.host }), settings), `HOST "${settings.host}" is not a name this machine resolves`);
  assert.match(startupHint(Object.assign(failure("ENOTFOUND"), { hostname: "db.internal" }), settings), "that MySQL is running", "a database host that does not resolve is DATABASE_URL's");
  assert.match(startupHint(failure("ECONNREFUSED"), settings), "that MySQL is running");
  assert.match(startupHint(new BlobStoreUnavailableError("down"), settings), "AZURE_STORAGE_CONNECTION_STRING");
});

s("an error it knows nothing about gets no hint", () => {
  assert.is(startupHint(new Error("boom"), settings), "");
  assert.is(startupHint("boom", settings), "");
});

s("the message names the causes it does not already say", () => {
  const cause = Object.assign(new Error("getaddrinfo ENOTFOUND acct.blob.core.windows.net"), { code: "ENOTFOUND" });
  assert.is(
    messageWithCauses(new BlobStoreUnavailableError("blob store: create container failed", { cause })),
    "blob store: create container failed: getaddrinfo ENOTFOUND acct.blob.core.windows.net",
  );
  assert.is(messageWithCauses(new Error("x failed: boom", { cause: new Error("boom") })), "x failed: boom", "a cause already said is not repeated");
  assert.is(messageWithCauses("plain"), "plain");
});

s.run();

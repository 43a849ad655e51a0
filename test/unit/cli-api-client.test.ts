// The CLI's REST client against a scripted local HTTP server: which
// failures it retries (503, a dropped connection), which it reports at once,
// and how it turns answers that are not the API's into clear errors.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "uvu";
import * as assert from "uvu/assert";
import { ApiClient } from "../../src/cli/api-client.js";
import { CliError, ServiceError } from "../../src/cli/cli-error.js";

type Step = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/** A server answering each request with the next step; returns its URL, the requests seen and a close function. */
async function scripted(steps: Step[]): Promise<{ url: string; seen: { method: string; url: string; auth: string; body: string }[]; close: () => Promise<void> }> {
  const seen: { method: string; url: string; auth: string; body: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", auth: req.headers.authorization ?? "", body });
      const step = steps[Math.min(seen.length - 1, steps.length - 1)]!;
      step(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An answer as the service gives it: every one names its request (x-request-id). */
const answer = (status: number, body: unknown, headers: Record<string, string> = {}): Step => (_req, res) => {
  res.writeHead(status, { "content-type": "application/json", "x-request-id": "req-1", ...headers });
  res.end(typeof body === "string" ? body : JSON.stringify(body));
};
const drop: Step = (req) => req.socket.destroy();

function client(url: string): { api: ApiClient; notes: string[] } {
  const notes: string[] = [];
  return { api: new ApiClient({ url, urlSource: "--url", token: "t0k", tokenSource: "--token" }, "t0k", (n) => notes.push(n)), notes };
}

test("sends the bearer token and the JSON body; answers status and body", async () => {
  const srv = await scripted([answer(201, { created: true })]);
  try {
    const { api } = client(srv.url);
    const res = await api.call<{ created: boolean }>("POST", "/api/entities/e/versions/confirm", { a: 1 });
    assert.equal([res.status, res.body, res.attempts], [201, { created: true }, 1]);
    assert.equal(srv.seen, [{ method: "POST", url: "/api/entities/e/versions/confirm", auth: "Bearer t0k", body: '{"a":1}' }]);
  } finally {
    await srv.close();
  }
});

test("a 503 is retried after Retry-After, and the retry's answer returned", async () => {
  const srv = await scripted([answer(503, { error: "busy", code: "DATABASE_BUSY" }, { "retry-after": "0" }), answer(200, { ok: 1 })]);
  try {
    const { api, notes } = client(srv.url);
    const res = await api.call("GET", "/x");
    assert.is(res.attempts, 2);
    assert.equal(res.body, { ok: 1 });
    assert.match(notes[0] ?? "", "HTTP 503 DATABASE_BUSY; retrying");
  } finally {
    await srv.close();
  }
});

test("a dropped connection is retried; with attempts 1 it is not", async () => {
  const srv = await scripted([drop, answer(200, { ok: 2 })]);
  try {
    assert.equal((await client(srv.url).api.call("POST", "/confirm", {}, { attempts: 4 })).body, { ok: 2 });
  } finally {
    await srv.close();
  }
  const once = await scripted([drop, answer(200, { ok: 3 })]);
  try {
    await client(once.url).api.call("DELETE", "/v", undefined, { attempts: 1 });
    assert.unreachable("a single attempt should fail");
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.is(once.seen.length, 1);
  } finally {
    await once.close();
  }
});

test("an answer cut while its body arrives is a network failure: retried (a confirm's lost answer), and reported as one on the last attempt", async () => {
  const cut: Step = (_req, res) => {
    res.writeHead(200, { "content-type": "application/json", "x-request-id": "req-1", "content-length": "200" });
    res.write('{"version": {"id": "v1"');
    setTimeout(() => res.socket?.destroy(), 20);
  };
  const srv = await scripted([cut, answer(200, { version: { id: "v1" }, created: false })]);
  try {
    const done = await client(srv.url).api.call("POST", "/confirm", {}, { attempts: 4, retryRefused: true });
    assert.equal([done.body, done.attempts], [{ version: { id: "v1" }, created: false }, 2]);
  } finally {
    await srv.close();
  }
  const always = await scripted([cut]);
  try {
    const error = await client(always.url).api.call("GET", "/v", undefined, { attempts: 1 }).then(() => undefined, (e: unknown) => e);
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
  } finally {
    await always.close();
  }
});

test("a service that takes the connection and never answers is said to be stuck, not to be started", async () => {
  const silent: Step = () => {};
  const srv = await scripted([silent]);
  try {
    const api = new ApiClient({ url: srv.url, urlSource: "--url", token: "t0k", tokenSource: "--token" }, "t0k", () => {}, 100);
    const error = await api.call("GET", "/api/entities/e/versions", undefined, { attempts: 2 }).then(() => undefined, (e: unknown) => e);
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.is(
      (error as CliError).message,
      `the service at ${srv.url} accepted the connection but did not answer within 0.1 s (2 attempts): it is overloaded or stuck; check its logs or ${srv.url}/readyz, or retry later.`,
    );
    assert.is(srv.seen.length, 2, "a call that timed out is retried as any network failure");
  } finally {
    await srv.close();
  }
});

test("an error answer becomes a ServiceError with the service's code, message and body; 4xx are not retried", async () => {
  const srv = await scripted([answer(409, { error: "stale", code: "STALE_BASE", latest_version: null })]);
  try {
    await client(srv.url).api.call("POST", "/u", {});
    assert.unreachable();
  } catch (error) {
    assert.instance(error, ServiceError);
    const e = error as ServiceError;
    assert.equal([e.status, e.code, e.message, e.exitCode], [409, "STALE_BASE", "stale", 3]);
    assert.equal(e.body, { error: "stale", code: "STALE_BASE", latest_version: null });
    assert.is(srv.seen.length, 1);
  } finally {
    await srv.close();
  }
});

test("ROUTE_NOT_FOUND and METHOD_NOT_ALLOWED point at --url: the CLI was given a page under the service, or the service is older", async () => {
  for (const [status, code] of [[404, "ROUTE_NOT_FOUND"], [405, "METHOD_NOT_ALLOWED"]] as const) {
    const srv = await scripted([answer(status, { error: "No route GET /docs/api/x", code })]);
    try {
      // A path naming an entity: its id goes into hints for ENTITY, never into ENTITY_VERSIONS_URL.
      const error = await client(srv.url).api.call("GET", "/api/entities/m2/versions", undefined).then(() => undefined, (e: unknown) => e);
      assert.instance(error, ServiceError);
      assert.match((error as ServiceError).hints.join("\n"), /check that --url \(or ENTITY_VERSIONS_URL\) is that root/);
    } finally {
      await srv.close();
    }
  }
});

test("a gateway's 502, 503 or 504 (no x-request-id) is retried as a network failure, and said to be the gateway's, never to start the service; the service's own 504 is not", async () => {
  const gateway = (status: number): Step => (_req, res) => {
    res.writeHead(status, { "content-type": "text/html" });
    res.end("<html>gateway</html>");
  };
  const srv = await scripted([gateway(502), gateway(504), answer(200, { ok: 3 })]);
  try {
    const { api, notes } = client(srv.url);
    const res = await api.call("POST", "/confirm", {}, { attempts: 4 });
    assert.equal([res.attempts, res.body], [3, { ok: 3 }]);
    assert.match(notes.join("\n"), "HTTP 502 from a gateway; retrying");
  } finally {
    await srv.close();
  }
  const once = await scripted([gateway(504), answer(200, { ok: 4 })]);
  try {
    await client(once.url).api.call("DELETE", "/x", undefined, { attempts: 1 });
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.match((error as CliError).message, "a gateway in front of the entity-versions service at");
    assert.match((error as CliError).message, "answered HTTP 504 without the service's answer: the service behind it is down");
    assert.not.match((error as CliError).message, "npm start", "the gateway runs: starting the service here would not help");
    assert.is(once.seen.length, 1);
  } finally {
    await once.close();
  }
  // A load balancer's HTML 503 (no healthy backend): the gateway's too, retried, then said so.
  const balancer = await scripted([gateway(503), gateway(503)]);
  try {
    await client(balancer.url).api.call("GET", "/x", undefined, { attempts: 2 });
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.match((error as CliError).message, "answered HTTP 503 (2 attempts) without the service's answer");
    assert.is(balancer.seen.length, 2);
  } finally {
    await balancer.close();
  }
  const own = await scripted([answer(504, { error: "deadline", code: "DEADLINE_EXCEEDED" }), answer(200, { ok: 5 })]);
  try {
    await client(own.url).api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, ServiceError);
    assert.is((error as ServiceError).code, "DEADLINE_EXCEEDED");
    assert.is(own.seen.length, 1);
  } finally {
    await own.close();
  }
});

test("a connection refused (nothing listens) says to start the service; nothing else does", async () => {
  const closed = http.createServer();
  await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  try {
    await client(`http://127.0.0.1:${port}`).api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.match((error as CliError).message, "(ECONNREFUSED): nothing listens there: start it (`npm start`)");
  }
});

test("an https:// URL at a server that speaks plain HTTP (the service does) says to use http://, not to trust a certificate", async () => {
  const srv = await scripted([answer(200, { ok: 1 })]);
  try {
    await client(srv.url.replace("http://", "https://")).api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.match((error as CliError).message, "speaks plain HTTP, not TLS", (error as Error).message);
    assert.not.match((error as CliError).message, "NODE_EXTRA_CA_CERTS");
  } finally {
    await srv.close();
  }
});

test("a refused token (401) says where the token and the URL came from: the right token sent to another service is the usual slip", async () => {
  const srv = await scripted([answer(401, { error: "The token's signature does not verify", code: "TOKEN_BAD_SIGNATURE" })]);
  try {
    const api = new ApiClient({ url: srv.url, urlSource: "the default", token: "t0k", tokenSource: "./data/dev-token", devTokenFile: "./data/dev-token" }, "t0k");
    await api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, ServiceError);
    const hints = (error as ServiceError).hints.join("\n");
    assert.match(hints, "pass a valid one with --token");
    // Left by a development start, it is refused once the service has a signer of its own.
    assert.match(hints, "A development token is accepted only while the service runs without AUTH_JWT_SECRET or AUTH_JWKS_URL, and until it expires: if it now runs with one, delete ./data/dev-token");
    assert.match(hints, `The token came from ./data/dev-token and the URL, ${srv.url}, from the default`);
    assert.match(hints, "point at it with --url or ENTITY_VERSIONS_URL");
  } finally {
    await srv.close();
  }
});

test("a port fetch refuses to connect to (6000, as browsers block) is said so at once, not retried as unreachable", async () => {
  const { api, notes } = client("http://127.0.0.1:6000");
  try {
    await api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "SERVICE_UNREACHABLE");
    assert.match((error as CliError).message, "its port is one that fetch refuses to connect to");
    assert.equal(notes, [], "not retried");
  }
});

test("an answer that is not the API's JSON says so and names the URL", async () => {
  const srv = await scripted([answer(502, "<html>bad gateway</html>")]);
  try {
    await client(srv.url).api.call("GET", "/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "UNEXPECTED_RESPONSE");
    assert.match((error as CliError).message, `${srv.url} answered HTTP 502`);
  } finally {
    await srv.close();
  }
});

test("a success answer from another server (no x-request-id: a wrong URL, a redirect elsewhere) is not taken for the API's", async () => {
  const other: Step = (_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"id":"x","version":"2026.01.01-000000"}');
  };
  const srv = await scripted([other]);
  try {
    await client(srv.url).api.call("GET", "/api/entities/e/versions/x");
    assert.unreachable();
  } catch (error) {
    assert.instance(error, CliError);
    assert.is((error as CliError).code, "UNEXPECTED_RESPONSE");
    assert.match((error as CliError).message, "is it the entity-versions service?");
  } finally {
    await srv.close();
  }
});

test.run();

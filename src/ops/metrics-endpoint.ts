import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Metrics } from "./metrics.js";
import { sharedReading } from "./shared-reading.js";

/**
 * The metrics in Prometheus text, one rendering shared by the scrapes that
 * come while it runs (none needs a token): a hundred on one connection,
 * never read, hold one answer's memory rather than a hundred. Never reused
 * once done, so every scrape after it sees fresh figures.
 */
export function metricsRenderer(metrics: Metrics): () => Promise<Buffer> {
  return sharedReading(async () => Buffer.from(await metrics.registry.metrics()), -1);
}

/** The metrics' own listener (METRICS_PORT). */
export interface MetricsListener {
  /** Listens; resolves with the address, as `http://host:port`. */
  listen(host: string, port: number): Promise<string>;
  close(): Promise<void>;
}

/**
 * `GET /metrics` alone, on a port of its own, so that the API's port can
 * face the world while the figures (calls by code, pool use, memory) stay
 * on an internal network: Prometheus scrapes the pod, the load balancer
 * never routes this port. Anything else is 404; an answer not taken
 * within `timeoutMs` is dropped with its connection.
 */
export function metricsListener(metrics: Metrics, timeoutMs: number): MetricsListener {
  const render = metricsRenderer(metrics);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics" || (req.method !== "GET" && req.method !== "HEAD")) {
      res.writeHead(path === "/metrics" ? 405 : 404, { "content-type": "text/plain", ...(path === "/metrics" ? { allow: "GET, HEAD" } : {}) });
      res.end(path === "/metrics" ? "GET /metrics\n" : "Only /metrics is served on METRICS_PORT.\n");
      return;
    }
    render().then(
      (body) => {
        res.writeHead(200, { "content-type": metrics.registry.contentType, "content-length": body.length });
        res.end(req.method === "HEAD" ? undefined : body);
      },
      () => {
        res.writeHead(500, { "content-type": "text/plain" });
        res.end("the metrics could not be rendered\n");
      },
    );
  });
  server.requestTimeout = timeoutMs;
  server.timeout = timeoutMs;
  server.keepAliveTimeout = timeoutMs;
  return {
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        // Said of METRICS_PORT, not of the API's PORT, which the start's hints speak of.
        const failed = (error: NodeJS.ErrnoException) =>
          reject(new Error(`METRICS_PORT ${port} on ${host}: ${error.code === "EADDRINUSE" ? "another process listens there; set METRICS_PORT to a free port" : error.message}`));
        server.once("error", failed);
        server.listen(port, host, () => {
          server.off("error", failed);
          const { address, port: bound, family } = server.address() as AddressInfo;
          resolve(`http://${family === "IPv6" ? `[${address}]` : address}:${bound}`);
        });
      }),
    close: () =>
      new Promise((resolve) => {
        if (!server.listening) return resolve();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

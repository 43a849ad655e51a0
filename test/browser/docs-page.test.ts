// The /docs reference page in a real headless Chromium: it loads, lists
// every operation of the document, logs no errors, and asks no other host
// for anything (the service may run on an isolated network).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { suite } from "uvu";
import * as assert from "uvu/assert";
import { chromiumAvailable, launchChromium } from "../support/browser.js";
import { apiDocument } from "../support/openapi.js";
import { startService, type TestService } from "../support/service.js";

const s = suite<{ svc: TestService }>("docs page: /docs in headless Chromium");

if (chromiumAvailable()) {
  s.before(async (ctx) => {
    ctx.svc = await startService("sqlite");
  });
  s.after(async (ctx) => {
    await ctx.svc?.close();
  });

  s("loads, lists every operation, logs no error and fetches nothing from another host", async ({ svc }) => {
    const browser = await launchChromium();
    try {
      const page = await browser.context.newPage();
      const errors: string[] = [];
      page.on("console", (m) => {
        if (m.type() === "error") errors.push(m.text());
      });
      page.on("pageerror", (e) => errors.push(e.message));
      const origin = new URL(svc.url).origin;
      const requested: string[] = [];
      const foreign: string[] = [];
      await page.route("**/*", (route) => {
        const url = route.request().url();
        requested.push(url);
        if (new URL(url).origin !== origin) {
          foreign.push(url);
          return route.abort();
        }
        return route.continue();
      });
      const response = await page.goto(`${svc.url}/docs`);
      assert.is(response?.status(), 200);
      await page.waitForSelector(".opblock-summary-path", { timeout: 30_000 });
      const shown = await page.$$eval(".opblock", (blocks) =>
        blocks.map((b) => {
          const method = b.querySelector(".opblock-summary-method")?.textContent ?? "";
          const p = b.querySelector(".opblock-summary-path")?.getAttribute("data-path") ?? "";
          return `${method.toUpperCase()} ${p}`;
        }),
      );
      const documented = Object.entries(apiDocument().document.paths as Record<string, Record<string, unknown>>).flatMap(([p, verbs]) => Object.keys(verbs).map((v) => `${v.toUpperCase()} ${p}`));
      assert.equal([...shown].sort(), [...documented].sort());
      // Open one operation: its parameters, answers and models render too.
      await page.click(".opblock-post .opblock-summary");
      await page.waitForSelector(".opblock-post .responses-table", { timeout: 10_000 });
      const screenshot = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ev-docs-")), "docs.png");
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`\n  docs page screenshot: ${screenshot}`);
      assert.equal(foreign, [], "requests to other hosts");
      assert.equal(errors, [], "console errors");
      assert.ok(requested.some((u) => u.endsWith("/openapi.json")), requested.join("\n"));
    } finally {
      await browser.close();
    }
  });
}

s.run();

// Headless Chromium for page tests: Debian's `chromium` (apt-get install
// chromium), driven by playwright-core, which downloads no browser of its own.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { type BrowserContext, chromium } from "playwright-core";
import { skippingOnPurpose } from "../runner/channel.js";

const executable = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";
const inCi = process.env["CI"] !== undefined && process.env["CI"] !== "" && process.env["CI"] !== "false";

/**
 * Whether the browser tests can run. Outside CI a missing Chromium skips
 * them with a loud line; in CI (CI set) it is an error, because a skipped
 * page test proves nothing.
 */
export function chromiumAvailable(): boolean {
  if (fs.existsSync(executable)) return true;
  if (inCi) throw new Error(`CI is set and there is no Chromium at ${executable}: install it (apt-get install -y chromium) or set CHROMIUM_PATH`);
  const line = "!".repeat(78);
  console.error(`\n${line}\n!! No Chromium at ${executable}: SKIPPING THE BROWSER TESTS.\n!! apt-get install -y chromium, or set CHROMIUM_PATH; CI requires them.\n${line}\n`);
  skippingOnPurpose(`no Chromium at ${executable}`);
  return false;
}

/**
 * A headless Chromium with a fresh profile and nothing running in the
 * background (no updates, sync or first-run pages), so that the only
 * requests it makes are the page's own.
 */
export async function launchChromium(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "ev-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: executable,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return {
    context,
    close: async () => {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

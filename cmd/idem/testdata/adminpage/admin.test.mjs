// Drives the gateway's admin page in headless Chromium (Debian's
// /usr/bin/chromium, never a downloaded browser), for TestAdminPageBrowser.
// The Go test starts the gateway, the load and the stuck key; this script
// does what an operator would, checks the page, and saves screenshots.
//
// Environment: ADMIN_URL, ADMIN_TOKEN, STUCK_KEY, SHOTS (a directory).
// It prints one JSON line with what it saw; it exits non-zero on failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const { ADMIN_URL, ADMIN_TOKEN, STUCK_KEY, SHOTS } = process.env;
const userDataDir = mkdtempSync(join(tmpdir(), "idem-admin-chromium-"));
const seen = {};
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", (d) => d.accept()); // the release confirmation

  // 1. The page loads and asks for the token.
  await page.goto(ADMIN_URL + "/");
  await page.locator("#token").waitFor({ state: "visible" });
  await page.screenshot({ path: join(SHOTS, "1-login.png") });
  // A wrong token is refused.
  await page.fill("#token", "wrong");
  await page.click("#save-token");
  await page.locator("#login-msg").filter({ hasText: "token" }).waitFor();
  seen.wrongToken = await page.textContent("#login-msg");

  // 2. With the token: live numbers while the load runs.
  await page.fill("#token", ADMIN_TOKEN);
  await page.click("#save-token");
  await page.locator("#dash").waitFor({ state: "visible" });
  await page.waitForFunction(() => {
    const v = (id) => parseFloat(document.getElementById(id).textContent);
    return v("rate-executions") > 0 && v("rate-replays") > 0 && v("rate-conflicts") > 0 &&
      document.getElementById("store-mean").textContent !== "–";
  }, null, { timeout: 30000 });
  // Two readings a few seconds apart: the numbers are live, not a snapshot.
  const read = () => page.evaluate(() => ({
    executions: document.getElementById("rate-executions").textContent,
    replays: document.getElementById("rate-replays").textContent,
    conflicts: document.getElementById("rate-conflicts").textContent,
    totalExecutions: parseInt(document.getElementById("total-executions").textContent, 10),
    storeMean: document.getElementById("store-mean").textContent,
    storeP99: document.getElementById("store-p99").textContent,
    inProgress: parseInt(document.getElementById("in-progress-count").textContent, 10),
    outcomeUnknown: parseInt(document.getElementById("outcome-unknown-count").textContent, 10),
    status: document.getElementById("status").textContent,
  }));
  seen.first = await read();
  await page.waitForFunction((n) => parseInt(document.getElementById("total-executions").textContent, 10) > n,
    seen.first.totalExecutions, { timeout: 20000 });
  // The stuck key is listed once a request ran into it.
  await page.locator("#outcome-unknown td.k", { hasText: STUCK_KEY }).first().waitFor({ timeout: 20000 });
  // A few more seconds of load, so that the sparklines have a history.
  await page.waitForTimeout(5000);
  seen.second = await read();
  await page.screenshot({ path: join(SHOTS, "2-dashboard-under-load.png"), fullPage: true });

  // 3. Inspect the stuck key from its row.
  await page.locator("#outcome-unknown tr", { hasText: STUCK_KEY }).getByRole("button", { name: "Inspect" }).click();
  await page.locator("#inspect-result").waitFor({ state: "visible" });
  seen.inspected = JSON.parse(await page.textContent("#inspect-result"));
  seen.inspectMsg = await page.textContent("#inspect-msg");
  await page.locator("#release-btn:not([disabled])").waitFor();
  await page.screenshot({ path: join(SHOTS, "3-inspect-stuck-key.png"), fullPage: true });

  // 4. Release it.
  await page.click("#release-btn");
  await page.locator("#inspect-msg").filter({ hasText: "Released" }).waitFor();
  seen.releaseMsg = await page.textContent("#inspect-msg");
  await page.screenshot({ path: join(SHOTS, "4-released.png"), fullPage: true });

  // 5. Inspecting it again finds nothing.
  await page.click("#inspect-btn");
  await page.locator("#inspect-msg").filter({ hasText: "no live record" }).waitFor();
  seen.afterRelease = await page.textContent("#inspect-msg");

  // A key whose outcome is known cannot be released from the page.
  seen.errors = errors;
  console.log(JSON.stringify(seen));
} finally {
  if (context) await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}

// Browser scenarios for the web UI, run by the Go tests in cmd/talkide
// (browser_test.go) against a real platform with the model simulator (a
// test and demo tool, not a model). One scenario per run:
//
//   node web/test/driver.mjs SCENARIO
//
// Environment: TALKIDE_URL (the control-plane), TALKIDE_CHROMIUM (the
// browser), TALKIDE_ARTIFACTS (where screenshots go). A scenario that needs
// the Go side (restart the control-plane) prints "STEP <name>" on stdout and
// waits for a line on stdin. It prints "RESULT <json>" for the Go test to
// check against the server's log, and exits non-zero with the reason on
// stderr when an assertion fails.
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { mkdtempSync, rmSync } from "node:fs";
import { scenarios } from "./scenarios.mjs";

const name = process.argv[2];
const base = process.env.TALKIDE_URL;
const exe = process.env.TALKIDE_CHROMIUM || "/usr/bin/chromium";
const artifacts = process.env.TALKIDE_ARTIFACTS || mkdtempSync(join(tmpdir(), "talkide-shots-"));
if (!base || !scenarios[name]) {
  console.error(`usage: TALKIDE_URL=… node driver.mjs {${Object.keys(scenarios).join("|")}}`);
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

const lines = createInterface({ input: process.stdin });
const waiting = [];
lines.on("line", (l) => waiting.shift()?.(l));
/** step asks the Go test to do something and waits until it is done. */
function step(what) {
  return new Promise((resolve) => {
    waiting.push(resolve);
    process.stdout.write(`STEP ${what}\n`);
  });
}

const profile = mkdtempSync(join(tmpdir(), "talkide-chromium-"));
// A fresh profile per run; playwright passes it as --user-data-dir.
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: exe,
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
// TALKIDE_AUTHORIZATION: a credential every request of the page carries
// (a user's API token), so a scenario can be a user of a shared
// control-plane without a login.
if (process.env.TALKIDE_AUTHORIZATION) await ctx.setExtraHTTPHeaders({ Authorization: process.env.TALKIDE_AUTHORIZATION });
let shot = 0;
const page = ctx.pages()[0] ?? (await ctx.newPage());
// What the page asks of other origins, and what its CSP refused: a
// scenario asserts on both.
const foreign = [];
const cspViolations = [];
const consoleErrors = [];
// TALKIDE_ALLOW_ORIGINS: other origins a scenario may visit (the OpenID
// Provider of the login scenario), separated by commas.
const allowed = new Set([new URL(base).origin, ...(process.env.TALKIDE_ALLOW_ORIGINS || "").split(",").filter(Boolean)]);
await ctx.route("**/*", (route) => {
  const u = new URL(route.request().url());
  if (!allowed.has(u.origin)) {
    foreign.push(route.request().url());
    return route.abort();
  }
  return route.continue();
});
page.on("console", (m) => {
  if (m.type() === "error") consoleErrors.push(m.text());
});
page.on("pageerror", (e) => consoleErrors.push("pageerror: " + e.message));
await page.exposeBinding("__talkideCSP", (_src, v) => cspViolations.push(v));
await page.addInitScript(() => {
  document.addEventListener("securitypolicyviolation", (e) =>
    window.__talkideCSP(`${e.violatedDirective} ${e.blockedURI}`));
});

const h = {
  base, page, ctx, step, foreign, cspViolations, consoleErrors, env: process.env,
  async screenshot(label) {
    const file = join(artifacts, `${name}-${String(++shot).padStart(2, "0")}-${label}.png`);
    await page.screenshot({ path: file, fullPage: false });
    return file;
  },
  result(v) {
    process.stdout.write("RESULT " + JSON.stringify(v) + "\n");
  },
};

let code = 0;
try {
  await scenarios[name](h);
  await h.screenshot("end");
} catch (e) {
  code = 1;
  console.error(`scenario ${name} failed: ${e?.stack ?? e}`);
  try {
    await h.screenshot("failure");
  } catch {}
  if (consoleErrors.length) console.error("console errors:\n" + consoleErrors.join("\n"));
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
  lines.close();
}
console.error(`screenshots: ${artifacts}`);
process.exit(code);

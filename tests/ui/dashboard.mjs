// Drives the dashboard (/ui) in Debian's headless Chromium through puppeteer-core, against a
// `warren serve` that tests/e2e/test_dashboard.py filled with sandboxes, execs, calls and a
// trajectory. Every page must load without a console or page error, show the objects the test
// made, follow a live exec's output, and refuse what a token without the scope may not see.
// Each page's screenshot is saved for a person to look at.
//
// usage: node dashboard.mjs PLAN.json   (PLAN: url, token, narrow_token, screenshots, and the
// objects: sandboxes [{id, label}], image, exec {sandbox, id, lines}, trajectory {id, steps})
// Prints one JSON object (checks passed, errors) and exits non-zero on any failure.
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const failures = [];
const passed = [];
const problems = [];  // console errors and uncaught exceptions, wherever they happen
// Chromium logs a refused request as a console error: expected only where the test is refused
// on purpose (a wrong token: 401; a token without the scope: 403), nowhere else.
let expectedRefusal = null;

function check(name, ok, detail = "") {
  (ok ? passed : failures).push(ok ? name : `${name}: ${detail}`);
}

async function waitText(page, selector, text, timeout = 20000) {
  await page.waitForFunction(
    (sel, t) => [...document.querySelectorAll(sel)].some((e) => e.textContent.includes(t)),
    { timeout }, selector, text);
}

async function shot(page, name) {
  fs.mkdirSync(plan.screenshots, { recursive: true });
  await page.screenshot({ path: path.join(plan.screenshots, name + ".png"), fullPage: true });
}

async function step(name, fn) {
  try {
    await fn();
    check(name, true);
  } catch (e) {
    check(name, false, e.message.split("\n")[0]);
  }
}

const browser = await puppeteer.launch({
  executablePath: plan.chromium || "/usr/bin/chromium",
  headless: true,
  // Root in CI: Chromium's own sandbox needs an unprivileged user.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const text = msg.text();
    if (expectedRefusal && text.startsWith("Failed to load resource") &&
        text.includes(`status of ${expectedRefusal}`)) return;
    problems.push(`console: ${text}`);
  });
  page.on("pageerror", (err) => problems.push(`page: ${err.message}`));
  const go = (hash) => page.goto(`${plan.url}/ui#${hash}`, { waitUntil: "domcontentloaded" });

  await step("login page", async () => {
    await go("/fleet");
    await page.waitForSelector("#login-form #token");
    await shot(page, "00-login");
  });
  await step("a wrong token is refused", async () => {
    expectedRefusal = 401;
    await page.type("#token", "not-a-token");
    await page.click("#login-form button[type=submit]");
    await waitText(page, "#login-error", "Refused");
    expectedRefusal = null;
  });
  await step("login", async () => {
    await page.$eval("#token", (e) => { e.value = ""; });
    await page.type("#token", plan.token);
    await page.click("#login-form button[type=submit]");
    await page.waitForSelector("#sandboxes-total");
  });

  await step("fleet: counts, nodes, the hour's charts", async () => {
    await page.waitForFunction((n) => Number(document.querySelector("#sandboxes-total")?.textContent) >= n,
      { timeout: 20000 }, plan.sandboxes.length);
    await page.waitForSelector("table .node-name");
    await page.waitForSelector("#sandbox-counts [data-backend=container]");
    // The charts come from the server's samples (GET /v1/stats): four, each with a title.
    await page.waitForFunction(() => document.querySelectorAll("#fleet-charts svg.chart").length === 4,
      { timeout: 20000 });
    await waitText(page, "#fleet-charts svg.chart text", "creates/s");
    await shot(page, "01-fleet");
  });

  await step("sandboxes: every one listed", async () => {
    await go("/sandboxes");
    for (const sb of plan.sandboxes) await waitText(page, "a.sandbox-link", sb.id);
    await shot(page, "02-sandboxes");
  });
  await step("sandboxes: filtered on the server by label", async () => {
    const [first] = plan.sandboxes;
    await go(`/sandboxes?${new URLSearchParams({ label: first.label, job: plan.job })}`);
    await waitText(page, "#sandbox-count", "1–1 of 1");
    await waitText(page, "a.sandbox-link", first.id);
    const shown = await page.$$eval("a.sandbox-link", (as) => as.map((a) => a.textContent));
    const others = plan.sandboxes.filter((s) => s.label !== first.label).map((s) => s.id);
    if (shown.some((id) => others.includes(id))) throw new Error(`filter leaked: ${shown}`);
  });
  await step("sandboxes: a page at a time, filtered by job, backend and image", async () => {
    const q = new URLSearchParams({ job: plan.job, backend: "container", image: plan.image_ref, limit: "2" });
    await go(`/sandboxes?${q}`);
    await waitText(page, "#sandbox-count", "1–2 of 3");
    const one = await page.$$eval("a.sandbox-link", (as) => as.map((a) => a.textContent));
    if (one.join() !== plan.sandboxes.slice(0, 2).map((s) => s.id).join()) throw new Error(`page 1: ${one}`);
    await page.click("#next-page");
    await waitText(page, "#sandbox-count", "3–3 of 3");
    const two = await page.$$eval("a.sandbox-link", (as) => as.map((a) => a.textContent));
    if (two.join() !== plan.sandboxes[2].id) throw new Error(`page 2: ${two}`);
    if (await page.$("#next-page")) throw new Error("a next page after the last");
    await shot(page, "02b-sandboxes-paged");
    await go(`/sandboxes?${new URLSearchParams({ job: plan.job, backend: "vm" })}`);
    await waitText(page, "#sandbox-count", "0 of 0");
  });
  await step("sandbox: spec, limits, network, exec history, live output", async () => {
    await go(`/sandboxes/${plan.exec.sandbox}`);
    await waitText(page, "#sandbox-state", "running");
    await waitText(page, "pre", '"mode"');
    await waitText(page, "#exec-history tr.exec.running a.exec-link", plan.exec.id);
    // The running command's output streams into the page while it runs.
    await waitText(page, "#live-exec", plan.exec.id);
    await waitText(page, "#live-output", plan.exec.lines[0], 30000);
    const seen = await page.$eval("#live-output", (e) => e.textContent.split("\n").length);
    await page.waitForFunction((n) => document.querySelector("#live-output").textContent.split("\n").length > n + 2,
      { timeout: 30000 }, seen);
    await shot(page, "03-sandbox");
  });
  await step("exec: live output follows", async () => {
    await go(`/sandboxes/${plan.exec.sandbox}/execs/${plan.exec.id}`);
    await waitText(page, "#exec-output", plan.exec.lines[0], 30000);
    // Still running: what arrives next comes through the open stream.
    const running = await page.$eval("#exec-status", (e) => e.textContent);
    if (!running.startsWith("following")) throw new Error(`the exec was over already: ${running}`);
    const seen = await page.$eval("#exec-output", (e) => e.textContent.split("\n").length);
    await page.waitForFunction((n) => document.querySelector("#exec-output").textContent.split("\n").length > n + 2,
      { timeout: 30000 }, seen);
    await shot(page, "04-exec-live");
    await waitText(page, "#exec-output", plan.exec.lines[plan.exec.lines.length - 1], 120000);
    await waitText(page, "#exec-status", "exited 0", 30000);
    await shot(page, "05-exec-done");
  });
  await step("trajectory: listed, steps, replayed marked", async () => {
    await go("/trajectories");
    await waitText(page, "a.trajectory-link", plan.trajectory.id);
    await page.click(`a.trajectory-link[href="#/trajectories/${encodeURIComponent(plan.trajectory.id)}"]`);
    await page.waitForSelector("tr.step");
    const rows = await page.$$eval("tr.step", (rs) => rs.length);
    if (rows !== plan.trajectory.steps) throw new Error(`${rows} steps shown, ${plan.trajectory.steps} made`);
    await page.waitForSelector("tr.replayed");
    await shot(page, "06-trajectory");
  });
  await step("images: the test's image and the sandboxes using it", async () => {
    await go("/images");
    await waitText(page, ".image-name", plan.image);
    const uses = await page.$$eval("tr", (rows, name) => rows
      .filter((r) => r.querySelector(".image-name")?.textContent === name)
      .map((r) => Number(r.querySelector(".image-uses")?.textContent || "0")), plan.image);
    if (!uses.some((n) => n >= plan.sandboxes.length)) throw new Error(`uses shown: ${uses}`);
    await shot(page, "07-images");
  });
  await step("fncall: verdicts and the runner pool", async () => {
    await go("/calls");
    await page.waitForSelector("#call-verdicts .tile[data-verdict=ok]");
    await page.waitForSelector("table code.runner");
    await shot(page, "08-calls");
  });

  await step("a token without sandbox:read is refused the sandboxes", async () => {
    await page.click("#logout");
    await page.waitForSelector("#login-form #token");
    await page.type("#token", plan.narrow_token);
    await page.click("#login-form button[type=submit]");
    await page.waitForSelector("#main h1");
    expectedRefusal = 403;
    await go("/sandboxes");
    await page.waitForSelector("[data-refused]");
    expectedRefusal = null;
    const links = await page.$$("a.sandbox-link");
    if (links.length) throw new Error(`${links.length} sandboxes shown`);
    await shot(page, "09-refused");
  });
} finally {
  await browser.close();
}
for (const p of problems) failures.push(p);
console.log(JSON.stringify({ passed, failures }));
process.exit(failures.length ? 1 : 0);

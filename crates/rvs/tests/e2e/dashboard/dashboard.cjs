// Drives rvsd's dashboard in headless Chromium for the e2e test
// crates/rvs/tests/e2e/dashboard.rs, through playwright-core (installed by
// scripts/install-deps into /var/cache/rvs-node; Debian's chromium).
//
// Talks to the test over stdio, one line each way:
//   node -> test   `shown`            the page lists the service and both real servers
//   test -> node   `stopped`          the test stopped RVS_DASH_DOWN's server
//   node -> test   `red <ms> <at> <colour>`
//                                     its row turned red, <ms> after `stopped`,
//                                     at <at> (ms since the epoch, taken in the
//                                     page by a MutationObserver), in <colour>
// or, with RVS_DASH_MODE=drain:
//   node -> test   `clicked`          Drain clicked on RVS_DASH_DRAIN's row
//   node -> test   `weight 0 shown`   the page shows it at weight 0
// Any failure: a line `error: ...` on stderr and exit status 1. Screenshots
// go to RVS_DASH_ARTIFACTS.
'use strict';

const path = require('path');
const readline = require('readline');

const env = (k, d) => {
  const v = process.env[k];
  if (v === undefined && d === undefined) throw new Error(`${k} is not set`);
  return v === undefined ? d : v;
};

const { chromium } = require(env('RVS_PLAYWRIGHT', 'playwright-core'));

const url = env('RVS_DASH_URL');
const artifacts = env('RVS_DASH_ARTIFACTS');
const mode = env('RVS_DASH_MODE', 'health');
const redWithin = Number(env('RVS_DASH_RED_WITHIN_MS', '3000'));

const lines = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve, reject) => {
  lines.once('line', resolve);
  lines.once('close', () => reject(new Error('the test closed stdin')));
});

const row = (page, rs) => page.locator(`tr[data-rs="${rs}"]`);

async function shot(page, name) {
  await page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
}

async function health(page) {
  const down = env('RVS_DASH_DOWN');
  const up = env('RVS_DASH_UP');
  const service = env('RVS_DASH_SERVICE');
  await page.locator(`[data-service="${service}"]`).waitFor({ timeout: 15000 });
  for (const rs of [up, down]) {
    await row(page, rs).waitFor({ timeout: 15000 });
    await page.waitForFunction(
      (sel) => document.querySelector(sel) && document.querySelector(sel).classList.contains('up'),
      `tr[data-rs="${rs}"]`, { timeout: 15000 });
  }
  // The moment the row turns red, taken in the page as the class changes
  // (not at waitForFunction's next poll).
  await page.evaluate((sel) => {
    window.rvsRedAt = null;
    const seen = () => {
      const e = document.querySelector(sel);
      if (window.rvsRedAt === null && e && e.classList.contains('down')) window.rvsRedAt = Date.now();
    };
    new MutationObserver(seen).observe(document.body,
      { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
  }, `tr[data-rs="${down}"]`);
  await shot(page, 'loaded');
  console.log('shown');
  if ((await nextLine()) !== 'stopped') throw new Error('expected `stopped`');
  const t0 = Date.now();
  await page.waitForFunction(
    (sel) => document.querySelector(sel) && document.querySelector(sel).classList.contains('down'),
    `tr[data-rs="${down}"]`, { timeout: redWithin, polling: 50 });
  const at = await page.evaluate(() => window.rvsRedAt);
  if (at === null) throw new Error('the observer missed the change');
  const ms = at - t0;
  if (await row(page, up).evaluate((e) => e.classList.contains('down'))) {
    throw new Error(`${up} turned red too`);
  }
  const color = await row(page, down).locator('td.health').evaluate((e) => getComputedStyle(e).color);
  await shot(page, 'down');
  console.log(`red ${ms} ${at} ${color}`);
}

async function drain(page) {
  const rs = env('RVS_DASH_DRAIN');
  await row(page, rs).waitFor({ timeout: 15000 });
  await page.fill('#token', env('RVS_DASH_TOKEN'));
  await page.click('#token-save');
  const button = row(page, rs).locator('button[data-action="drain"]');
  await button.waitFor({ state: 'visible', timeout: 5000 });
  await shot(page, 'before-drain');
  await button.click();
  console.log('clicked');
  await page.waitForFunction(
    (sel) => { const e = document.querySelector(sel); return e && e.textContent === '0'; },
    `tr[data-rs="${rs}"] td.weight`, { timeout: 10000 });
  const errors = await page.locator('#errors').textContent();
  if (errors.trim()) throw new Error(`the page shows errors: ${errors}`);
  await shot(page, 'drained');
  console.log('weight 0 shown');
}

(async () => {
  const browser = await chromium.launch({
    executablePath: env('RVS_CHROMIUM', '/usr/bin/chromium'),
    // As root (CI) Chromium needs --no-sandbox.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  let code = 0;
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  // Nothing but rvsd itself may be asked for.
  const origin = new URL(url).origin;
  page.on('request', (r) => { if (!r.url().startsWith(origin)) problems.push(`fetched ${r.url()}`); });
  try {
    await page.goto(url, { waitUntil: 'load', timeout: 15000 });
    if (mode === 'drain') await drain(page); else await health(page);
    if (problems.length) throw new Error(problems.join('; '));
  } catch (e) {
    code = 1;
    console.error(`error: ${e.message}`);
    await shot(page, `failed-${mode}`).catch(() => {});
  } finally {
    await browser.close();
    lines.close();
  }
  process.exit(code);
})();

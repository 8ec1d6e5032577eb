// Drives Debian's headless chromium through playwright-core for
// tests/cluster/dashboard_slice.sh: logs in with the URL `corral dashboard`
// printed, opens the overview, the slice page and a node's page, and
// prints what the pages drew as one JSON line.
// Usage: node slice.mjs LOGIN_URL SLICE SHOTS [NODE]
import { createRequire } from 'node:module';
const require = createRequire(process.env.CORRAL_WEB_NODE_MODULES + '/');
const { chromium } = require('playwright-core');
const [login, slice, shots, node] = process.argv.slice(2);
const out = { errors: [], pages: {} };
const browser = await chromium.launch({ executablePath: process.env.CORRAL_CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  page.on('console', m => { if (m.type() === 'error') out.errors.push(page.url() + ': ' + m.text()); });
  page.on('pageerror', e => out.errors.push(page.url() + ': ' + e.message));
  page.on('requestfailed', r => out.errors.push('request failed: ' + r.url()));
  page.on('request', r => { if (!r.url().startsWith(new URL(login).origin)) out.errors.push('outside fetch: ' + r.url()); });
  await page.goto(login);
  await page.waitForFunction(() => window.corral && window.corral.ready, null, { timeout: 20000 });
  out.pages.overview = { slice_link: await page.evaluate(s =>
    !!document.querySelector('a[href="#/slice/' + encodeURIComponent(s) + '"]'), slice) };
  await page.evaluate(h => { location.hash = h; }, '#/slice/' + encodeURIComponent(slice));
  await page.waitForFunction(() => window.corral && window.corral.ready, null, { timeout: 20000 });
  await page.waitForTimeout(300);
  out.pages.slice = await page.evaluate(() => ({ ...window.corral.slice, text: document.getElementById('main').innerText }));
  await page.screenshot({ path: shots + '/dashboard-slice.png', fullPage: true });
  if (node) {
    await page.evaluate(h => { location.hash = h; }, '#/node/' + encodeURIComponent(node));
    await page.waitForFunction(n => window.corral && window.corral.ready && window.corral.node === n, node,
      { timeout: 20000 });
    await page.waitForTimeout(300);
    out.pages.node = await page.evaluate(() => ({ graph: window.corral.graph }));
    await page.screenshot({ path: shots + '/dashboard-node-' + node + '.png', fullPage: true });
  }
} catch (e) {
  out.errors.push('gave up: ' + e.message.split('\n')[0]);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

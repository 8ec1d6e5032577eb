// Drives Debian's headless chromium through playwright-core for
// tests/cli/dashboard.sh: logs in with the URL `corral dashboard` printed,
// opens each page, and prints what it saw as one JSON line. Screenshots go
// to SHOTS. Usage: node dashboard.mjs LOGIN_URL NODE JOB SHOTS
import { createRequire } from 'node:module';
const require = createRequire(process.env.CORRAL_WEB_NODE_MODULES + '/');
const { chromium } = require('playwright-core');
const [login, node, job, shots] = process.argv.slice(2);
const out = { errors: [], pages: {} };
const browser = await chromium.launch({ executablePath: process.env.CORRAL_CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.on('console', m => { if (m.type() === 'error') out.errors.push(page.url() + ': ' + m.text()); });
  page.on('pageerror', e => out.errors.push(page.url() + ': ' + e.message));
  page.on('requestfailed', r => { if (!r.url().includes('/events/stream')) out.errors.push('request failed: ' + r.url()); });
  page.on('request', r => { if (!r.url().startsWith(new URL(login).origin)) out.errors.push('outside fetch: ' + r.url()); });
  await page.goto(login);
  out.landed = new URL(page.url()).pathname + new URL(page.url()).search;
  const visit = async (name, hash, wait) => {
    if (hash !== null) await page.evaluate(h => { location.hash = h; }, hash);
    await page.waitForFunction(wait || (() => window.corral && window.corral.ready), null, { timeout: 20000 });
    await page.waitForTimeout(300); // let the layout settle for the picture
    out.pages[name] = await page.evaluate(() => JSON.parse(JSON.stringify(
      { graph: window.corral.graph, events: window.corral.events, text: document.getElementById('main').innerText })));
    await page.screenshot({ path: shots + '/dashboard-' + name + '.png' });
  };
  await visit('overview', null);
  await visit('node', '#/node/' + encodeURIComponent(node));
  out.pages.node.first_chart = await page.evaluate(() => window.corral.chart); // on first load: the head's history
  await page.waitForFunction(() => window.corral.chart && window.corral.chart.points - window.corral.chart.history >= 3, null, { timeout: 20000 });
  out.pages.node.chart = await page.evaluate(() => window.corral.chart);
  await page.screenshot({ path: shots + '/dashboard-node-telemetry.png', fullPage: true });
  await visit('jobs', '#/jobs');
  await visit('job', '#/node/' + encodeURIComponent(node) + '/job/' + encodeURIComponent(job));
  await visit('events', '#/events', () => window.corral && window.corral.events > 0);
} catch (e) { // a page that never got ready: say so with what it logged
  out.errors.push('gave up: ' + e.message.split('\n')[0]);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

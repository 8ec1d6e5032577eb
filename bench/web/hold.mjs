// bench/web: headless chromium holding one dashboard page open, for the
// head's CPU an open dashboard costs. Logs in with the URL `corral
// dashboard` printed, opens HASH ("" the overview), prints "ready" once
// the page has drawn, and keeps it open (polling, the event stream) for
// SECONDS. Usage: node hold.mjs LOGIN_URL HASH SECONDS
import { createRequire } from 'node:module';
const require = createRequire(process.env.CORRAL_WEB_NODE_MODULES + '/');
const { chromium } = require('playwright-core');
const [login, hash, seconds] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CORRAL_CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
    '--disable-background-networking', '--disable-component-update', '--no-first-run'] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  await page.goto(login);
  if (hash) await page.evaluate(h => { location.hash = h; }, hash);
  await page.waitForFunction(() => window.corral && window.corral.ready, null, { timeout: 120000 });
  console.log('ready');
  await page.waitForTimeout(1000 * Number(seconds));
} finally {
  await browser.close();
}

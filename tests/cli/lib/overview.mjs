// Debian's headless chromium (playwright-core) logs in to the dashboard
// with the URL `corral dashboard` printed, reads the overview (its summary
// and first page of nodes), follows its "next" link to the second page
// where there is one, and prints what it saw as one JSON line. With a
// pin (tests/cli/web_tls.sh), over HTTPS trusting exactly the head's key
// (--ignore-certificate-errors-spki-list=PIN: the pin, not "any
// certificate"); without, plain HTTP (tests/cli/queue_view.sh).
// Usage: node overview.mjs LOGIN_URL [SPKI_PIN_BASE64]
import { createRequire } from 'node:module';
const require = createRequire(process.env.CORRAL_WEB_NODE_MODULES + '/');
const { chromium } = require('playwright-core');
const [login, pin] = process.argv.slice(2);
const out = { errors: [], pages: {} };
const browser = await chromium.launch({ executablePath: process.env.CORRAL_CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']
    .concat(pin ? ['--ignore-certificate-errors-spki-list=' + pin] : []) });
try {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  const page = await ctx.newPage();
  page.on('console', m => { if (m.type() === 'error') out.errors.push(page.url() + ': ' + m.text()); });
  page.on('pageerror', e => out.errors.push(page.url() + ': ' + e.message));
  page.on('request', r => { if (!r.url().startsWith(new URL(login).origin)) out.errors.push('outside fetch: ' + r.url()); });
  await page.goto(login);
  out.landed = page.url();
  out.cookies = (await ctx.cookies()).map(c => ({ name: c.name, secure: c.secure, httpOnly: c.httpOnly }));
  const read = async () => {
    await page.waitForFunction(() => window.corral && window.corral.ready, null, { timeout: 30000 });
    return page.evaluate(() => ({ overview: window.corral.overview,
      pager: (document.querySelector('.pager') || {}).textContent || '',
      text: document.getElementById('main').innerText }));
  };
  out.pages.first = await read();
  if (await page.$('.pager a:text("next")')) {
    await page.click('.pager a:text("next")');
    await page.waitForFunction(() => window.corral && window.corral.overview && window.corral.overview.from > 0,
      null, { timeout: 30000 });
    out.pages.second = await read();
    out.pages.second.hash = await page.evaluate(() => location.hash);
  }
} catch (e) {
  out.errors.push('gave up: ' + e.message.split('\n')[0]);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));

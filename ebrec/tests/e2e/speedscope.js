// Loads a pprof profile into speedscope (npm `speedscope`, its offline build
// dist/release/index.html) in headless Chromium (playwright-core driving /usr/bin/chromium)
// with the network off, switches to the sandwich view (a DOM table of functions) and prints
// one JSON line for the Rust test (ebrec/tests/e2e/reports.rs):
//   node speedscope.js PROFILE.pb.gz PLAYWRIGHT_MODULES SPEEDSCOPE_MODULES SCREENSHOT.png
'use strict';
const path = require('path');
const [, , profile, pwModules, ssModules, shotFile] = process.argv;
const { chromium } = require(require.resolve('playwright-core', { paths: [pwModules] }));
const index = path.join(path.dirname(require.resolve('speedscope/package.json', { paths: [ssModules] })), 'dist/release/index.html');

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--use-angle=swiftshader', '--enable-unsafe-swiftshader'],
  });
  const out = { requests: [], errors: [] };
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    await context.setOffline(true);
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file:') || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
      out.requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.on('pageerror', (e) => out.errors.push('page: ' + e.message));
    await page.goto('file://' + index);
    await page.locator('input[type=file]').setInputFiles(profile);
    await page.waitForFunction(() => document.title !== 'speedscope', null, { timeout: 30000 });
    out.title = await page.title();
    out.before = await page.evaluate(() => document.body.innerText);
    await page.getByText('Sandwich').first().click();
    await page.waitForTimeout(1000);
    out.text = await page.evaluate(() => document.body.innerText);
    await page.screenshot({ path: shotFile });
  } catch (e) {
    out.errors.push('driver: ' + e.message);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})();

// GraphiQL in a real browser with no internet: every request that does not go to the
// modelplane under test is aborted and recorded. Types the token into the Headers tab, runs
// the default query, and prints what happened as JSON (the Rust test asserts on it).
//
//   node tests/browser/graphiql.js http://127.0.0.1:PORT TOKEN
const { chromium } = require('playwright-core');

(async () => {
  const [base, token] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const page = await browser.newPage();
  const outside = [];
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.route(
    (url) => !url.href.startsWith(base + '/'),
    (route) => { outside.push(route.request().url()); return route.abort(); },
  );
  await page.goto(base + '/graphql', { waitUntil: 'networkidle' });
  await page.waitForSelector('.graphiql-container', { timeout: 20000 });
  await page.getByText('Headers', { exact: true }).click();
  await page.locator('.graphiql-editor-tool .CodeMirror').last().click();
  await page.keyboard.press('Control+A');
  await page.keyboard.type(`{"Authorization": "Bearer ${token}"}`);
  await page.locator('.graphiql-execute-button').click();
  await page.waitForFunction(
    () => (document.querySelector('.result-window')?.innerText || '').includes('"viewer"'),
    null,
    { timeout: 20000 },
  );
  const result = await page.locator('.result-window').innerText();
  console.log(JSON.stringify({ outside, errors, result }));
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });

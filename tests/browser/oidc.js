// Single sign-on in the portal, end to end: Debian's headless Chromium (playwright-core)
// signs in through a real OpenID Connect provider (tests/browser/idp.js, the `oidc-provider`
// package) against the whole system started by scripts/e2e.sh with OIDC configured.
//
//   BASE=http://127.0.0.1:PORT ISSUER=http://127.0.0.1:IDP TOKEN=<platform-admin token> node tests/browser/oidc.js
//
// What a person at a company does: opens the portal, signs in with their usual login (no
// secret pasted); on a project where their group is bound as viewer sees no write control
// (and `me` says viewer), on one where another group makes them editor sees them; keeps
// watching a live page while the provider's short tokens are refreshed underneath; signs
// out at the provider in another tab and finds the portal saying the session ended; signs
// in again and signs out from the portal, which ends the provider's session too. No request
// leaves for an origin other than the portal's and the provider's; axe finds no violation on
// the sign-in screens.
const assert = require('node:assert/strict');
const { chromium } = require('playwright-core');
const common = require('./common');
const { accessible, step } = common;

const BASE = process.env.BASE;
const ISSUER = process.env.ISSUER;
const TOKEN = process.env.TOKEN;
const TTL = Number(process.env.TOKEN_TTL || 20);
const WAIT = { timeout: 60_000 };
const VIEWED = 'sso-viewer';
const EDITED = 'sso-editor';

const rest = (method, url, body) => common.rest(BASE, TOKEN, method, url, body);

/** From the portal's sign-in screen through the provider's login and consent, back. */
async function signInAtProvider(page, user) {
  await page.getByRole('button', { name: 'Sign in with single sign-on' }).click();
  await page.waitForURL((url) => url.href.startsWith(ISSUER + '/'), WAIT);
  await page.locator('input[name="login"]').fill(user);
  await page.locator('input[name="password"]').fill('any password');
  await page.locator('button[type="submit"]').click();
  // The provider asks once to let the portal have the profile and groups.
  await page.waitForURL((url) => url.href.startsWith(BASE + '/') || url.href.includes('/interaction/'), WAIT);
  if (!page.url().startsWith(BASE + '/')) {
    await page.locator('button[type="submit"]').click();
  }
  await page.waitForURL((url) => url.href.startsWith(BASE + '/') && !url.pathname.startsWith('/auth/'), WAIT);
}

(async () => {
  assert.ok(BASE && ISSUER && TOKEN, 'BASE, ISSUER and TOKEN must be set');

  step('two projects: alice is a viewer on one and an editor on the other, through her groups');
  for (const [project, group, role] of [
    [VIEWED, 'ml-viewers', 'viewer'],
    [EDITED, 'ml-editors', 'editor'],
  ]) {
    const created = await rest('POST', '/api/v1/projects', { name: project });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const bound = await rest('POST', `/api/v1/projects/${project}/role-bindings`, { subjectKind: 'group', subject: group, role });
    assert.equal(bound.status, 201, JSON.stringify(bound.body));
    const deployed = await rest('POST', `/api/v1/projects/${project}/deployments`, {
      name: 'qwen',
      spec: { model: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct' }, engine: { kind: 'sim' } },
    });
    assert.equal(deployed.status, 201, JSON.stringify(deployed.body));
  }

  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
  const outside = [];
  const errors = [];
  const bearers = new Set();
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.route(
      (url) => !url.href.startsWith(BASE + '/') && !url.href.startsWith(ISSUER + '/'),
      (route) => {
        // The portal's own pages must ask nothing elsewhere; the provider's development
        // pages import a web font, which is aborted too but is the provider's business.
        let from = '';
        try {
          from = route.request().frame().url();
        } catch {
          // A request without a frame (a service worker): the portal has none.
        }
        if (!from.startsWith(ISSUER + '/')) outside.push(route.request().url());
        return route.abort();
      },
    );
    const page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (request) => {
      const auth = request.headers().authorization;
      if (request.url().startsWith(BASE + '/api/') && auth) bearers.add(auth);
    });

    step('the sign-in screen offers single sign-on, and is accessible');
    await page.goto(`${BASE}/projects/${VIEWED}/deployments`);
    await page.getByRole('button', { name: 'Sign in with single sign-on' }).waitFor(WAIT);
    await accessible(page, 'the sign-in screen with single sign-on');

    step('sign in at the provider; back on the page asked for, with no secret in the URL or localStorage');
    await signInAtProvider(page, 'alice');
    assert.equal(new URL(page.url()).pathname, `/projects/${VIEWED}/deployments`);
    assert.equal(new URL(page.url()).search, '', 'the code and state left the URL');
    await page.getByRole('button', { name: 'Sign out' }).waitFor(WAIT);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');
    assert.ok(!(await page.content()).includes('code='), 'no code left on the page');

    step(`on ${VIEWED} (viewer through ml-viewers): no write control, and me says viewer`);
    await page.getByRole('link', { name: 'qwen' }).waitFor(WAIT);
    assert.equal(await page.getByRole('link', { name: 'Create deployment' }).count(), 0);
    assert.equal(await page.getByRole('link', { name: 'Tokens & access' }).count(), 0);
    const bearer = [...bearers].at(-1);
    const me = await (await fetch(`${BASE}/api/v1/projects/${VIEWED}/me`, { headers: { Authorization: bearer } })).json();
    assert.deepEqual(me, { project: VIEWED, name: 'user:alice', role: 'viewer', via: 'role-binding' });
    await page.getByRole('link', { name: 'qwen' }).click();
    await page.getByRole('heading', { name: 'qwen' }).first().waitFor(WAIT);
    assert.equal(await page.getByRole('button', { name: /^Delete/ }).count(), 0, 'no Delete for a viewer');

    step(`on ${EDITED} (editor through ml-editors): the write controls`);
    await page.goto(`${BASE}/projects/${EDITED}/deployments`);
    await page.getByRole('link', { name: 'Create deployment' }).first().waitFor(WAIT);
    const editorMe = await (await fetch(`${BASE}/api/v1/projects/${EDITED}/me`, { headers: { Authorization: bearer } })).json();
    assert.equal(editorMe.role, 'editor');

    step(`a live page survives the provider's ${TTL} s tokens being refreshed`);
    await page.evaluate(() => {
      window.__noReload = true;
    });
    const first = bearers.size;
    // Two lifetimes: the token the list's stream was opened with has ended (the API ends
    // such a stream at the token's `exp`) and the portal has sent refreshed ones.
    const refreshedBy = Date.now() + (2 * TTL + 20) * 1000;
    while (bearers.size < first + 2 && Date.now() < refreshedBy) {
      await page.waitForTimeout(1000);
    }
    assert.ok(bearers.size >= first + 2, `the portal sent refreshed tokens (${bearers.size - first} new)`);
    const added = await rest('POST', `/api/v1/projects/${EDITED}/deployments`, {
      name: 'added-live',
      spec: { model: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct' }, engine: { kind: 'sim' } },
    });
    assert.equal(added.status, 201, JSON.stringify(added.body));
    await page.getByRole('link', { name: 'added-live' }).waitFor(WAIT);
    assert.equal(await page.evaluate(() => window.__noReload), true, 'no reload: the stream carried it');
    assert.equal(await page.getByLabel('API token', { exact: true }).count(), 0, 'still signed in');

    step("signed out at the provider (another tab): the portal's session ends cleanly");
    const other = await context.newPage();
    await other.goto(`${ISSUER}/session/end`);
    await other.getByRole('button', { name: 'Yes, sign me out' }).click();
    await other.waitForLoadState();
    await other.close();
    await page.getByText('Your session ended').waitFor({ timeout: (TTL + 30) * 1000 });
    await page.getByRole('button', { name: 'Sign in with single sign-on' }).waitFor(WAIT);
    await accessible(page, 'the session-ended screen');

    step('sign in again; sign out from the portal ends the provider session too');
    await signInAtProvider(page, 'alice');
    await page.getByRole('button', { name: 'Sign out' }).click();
    // The provider asks to confirm, then sends the browser back to the portal.
    await page.waitForURL((url) => url.href.startsWith(ISSUER + '/'), WAIT);
    await page.getByRole('button', { name: 'Yes, sign me out' }).click();
    await page.waitForURL((url) => url.href.startsWith(BASE + '/'), WAIT);
    await page.getByRole('button', { name: 'Sign in with single sign-on' }).waitFor(WAIT);
    // The provider's session is over: signing in asks for the login again.
    await page.getByRole('button', { name: 'Sign in with single sign-on' }).click();
    await page.locator('input[name="login"]').waitFor(WAIT);

    assert.deepEqual(outside, [], 'the portal asked nothing of any origin but its own and the provider');
    assert.deepEqual(errors, [], 'no script error on any page');
    console.error('single sign-on end-to-end: all steps passed');
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

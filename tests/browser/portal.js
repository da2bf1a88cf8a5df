// The portal end to end, in Debian's headless Chromium driven by playwright-core, against the
// whole system started by scripts/e2e.sh (the emulator, the API, the worker, the built
// portal). Every request that leaves modelplane's origin is aborted and fails the run.
//
//   BASE=http://127.0.0.1:PORT TOKEN=<platform-admin token> SCREENSHOTS=dir node tests/browser/portal.js
//
// What a person does: sign in; create the first project; create a `sim` deployment through the form (after a value
// only the API rejects shows its error next to the field) and watch it reach Ready without a
// reload; copy its endpoint; chat with it; see it counted in Serving; scale it to 2; edit it, roll back to revision 1 and
// read the diff; check a viewer sees no edit controls; delete it and see it leave the list; create one that
// scales to zero and wake it with a request through its Gateway URL.
const assert = require('node:assert/strict');
const path = require('node:path');
const { chromium } = require('playwright-core');
const common = require('./common');
const { accessible, step } = common;

const BASE = process.env.BASE;
const TOKEN = process.env.TOKEN;
const SHOTS = process.env.SCREENSHOTS || path.resolve('target/portal-screenshots');
const PROJECT = process.env.PROJECT || 'e2e';
const NAME = 'chat';
const WAIT = { timeout: 60_000 };

/** A REST call with the admin token (or another), to set up what the portal does not. */
const rest = (method, url, body, token = TOKEN) => common.rest(BASE, token, method, url, body);

async function expectTitle(page, title) {
  await page.waitForFunction((t) => document.title === t, title, WAIT).catch(async () => {
    assert.equal(await page.title(), title);
  });
}

/**
 * Signs in with the keyboard only: the token field has the focus (with single sign-on
 * configured, its button has it and one Tab reaches the token field), Enter submits.
 */
async function signIn(page, token) {
  await page.goto(BASE + '/');
  await page.getByLabel('API token', { exact: true }).waitFor(WAIT);
  if (process.env.ISSUER) {
    const focused = await page.evaluate(() => document.activeElement?.textContent);
    assert.equal(focused, 'Sign in with single sign-on', 'the single sign-on button has the focus');
    await page.keyboard.press('Tab');
  }
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'token', 'the token field has the focus');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  await page.getByRole('button', { name: 'Sign out' }).waitFor(WAIT);
}

(async () => {
  assert.ok(BASE && TOKEN, 'BASE and TOKEN must be set');

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const outside = [];
  const errors = [];
  const newPage = async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
    const page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.route(
      (url) => !url.href.startsWith(BASE + '/'),
      (route) => {
        outside.push(route.request().url());
        return route.abort();
      },
    );
    return page;
  };

  try {
    const page = await newPage();
    step('sign in with the token');
    await page.goto(BASE + '/');
    await page.getByLabel('API token', { exact: true }).waitFor(WAIT);
    await accessible(page, 'the sign-in screen');
    await signIn(page, TOKEN);

    step('a fresh installation: the first project is made in the portal');
    if (process.env.FRESH === '0') {
      await page.getByRole('link', { name: 'New project' }).click();
    } else {
      await page.getByRole('heading', { name: 'Create your first project' }).waitFor(WAIT);
      await accessible(page, 'the first-project screen');
    }
    await page.getByLabel('Project name').fill(PROJECT);
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.waitForURL(`**/projects/${PROJECT}/deployments`, WAIT);
    await page.getByText('No deployments').first().waitFor(WAIT);
    const viewer = await rest('POST', `/api/v1/projects/${PROJECT}/tokens`, { name: `${PROJECT}-viewer`, role: 'viewer' });
    assert.equal(viewer.status, 201, JSON.stringify(viewer.body));
    // A marker that a reload would wipe: everything after this must happen live.
    await page.evaluate(() => {
      window.__noReload = true;
    });

    step('create a sim deployment through the form; the API field error shows next to its field');
    // The project's quota bar: none set yet, so what it asks for and "no quota".
    await page.getByTestId('quota-none').getByText(/no quota/).waitFor(WAIT);
    await page.getByRole('link', { name: 'Create deployment' }).first().click();
    await page.getByRole('button', { name: /Simulator/ }).click();
    // The cluster's free GPUs from GET /api/v1/capacity (scripts/run.sh: 3 nodes x 8 GPUs).
    const capacity = await rest('GET', '/api/v1/capacity');
    assert.equal(capacity.status, 200, JSON.stringify(capacity.body));
    const gpus = capacity.body.gpus.find((g) => g.resourceName === 'nvidia.com/gpu');
    assert.ok(gpus && gpus.allocatable === 24, JSON.stringify(capacity.body));
    await page
      .getByRole('region', { name: 'Free GPUs' })
      .getByTestId('gpu-capacity-entry')
      .filter({ hasText: `${gpus.free} free of 24` })
      .waitFor(WAIT);
    await page.getByLabel('Name', { exact: true }).fill(NAME);
    await page.getByLabel('Model source').fill('ftp://example.com/weights');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const source = page.getByLabel('Model source');
    await page.waitForFunction(
      () => document.querySelector('[aria-invalid="true"]') !== null,
      null,
      WAIT,
    );
    const described = await source.evaluate((el) =>
      (el.getAttribute('aria-describedby') || '')
        .split(' ')
        .map((id) => document.getElementById(id)?.textContent || '')
        .join(' '),
    );
    // The very message the API gives for that value, shown with the field.
    const probe = await rest('POST', `/api/v1/projects/${PROJECT}/deployments`, {
      name: 'probe',
      spec: { model: { source: 'ftp://example.com/weights' }, engine: { kind: 'sim' } },
    });
    assert.equal(probe.status, 422);
    const apiMessage = probe.body.errors.find((e) => e.field === 'spec.model.source').message;
    assert.ok(described.includes(apiMessage), `"${apiMessage}" is next to Model source (its description: ${described})`);
    await page.screenshot({ path: path.join(SHOTS, 'create-form-with-error.png'), fullPage: true });
    await accessible(page, 'the create form with an error');

    await source.fill('hf://Qwen/Qwen2.5-0.5B-Instruct');
    await page.getByText('Show as curl').click();
    const curl = await page.locator('pre', { hasText: 'curl -X POST' }).innerText();
    assert.ok(curl.includes(`/api/v1/projects/${PROJECT}/deployments`), curl);
    assert.ok(!curl.includes(TOKEN), 'the curl panel never shows the real token');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.waitForURL(`**/projects/${PROJECT}/deployments/${NAME}`, WAIT);
    await expectTitle(page, `${NAME} · ${PROJECT} · modelplane`);

    step('the deployment page follows it to Ready without a reload');
    await page.locator('[data-phase="Ready"]').first().waitFor(WAIT);
    assert.equal(await page.evaluate(() => window.__noReload), true, 'the page was not reloaded');

    step('copy the endpoint');
    const api = await rest('GET', `/api/v1/projects/${PROJECT}/deployments/${NAME}`);
    const external = api.body.status.endpoints.external[0];
    assert.ok(external, 'the deployment has an external URL');
    await page.getByRole('button', { name: `Copy URL: ${external}` }).first().click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), external);

    step('try it: one chat message, and the model answers');
    await page.getByLabel('Message', { exact: true }).fill('Hello from the portal');
    await page.getByRole('button', { name: 'Send' }).click();
    const answer = page.getByRole('region', { name: 'Answer' });
    await answer.getByText(/\S/).first().waitFor(WAIT);
    const answerText = await answer.innerText();
    assert.ok(answerText.trim().length > 0, 'an answer is shown');
    await page.screenshot({ path: path.join(SHOTS, 'deployment-page.png'), fullPage: true });
    await accessible(page, 'the deployment page');

    step('the Serving section shows what the pod serves, live: another message counts in requests/s');
    // scripts/e2e.sh has the worker read the pods every 2 s. A rate needs two readings of
    // the pod, so the message is sent once the first one is shown.
    const serving = page.getByRole('region', { name: 'Serving' });
    await serving.getByText(/1 of 1 ready pod read · vllm metrics/).waitFor(WAIT);
    await page.getByLabel('Message', { exact: true }).fill('Count this one');
    await page.getByRole('button', { name: 'Send' }).click();
    await serving.getByText(/^(?!0 req\/s)\d[\d.,]* req\/s$/).first().waitFor(WAIT);
    await page.screenshot({ path: path.join(SHOTS, 'deployment-serving.png'), fullPage: true });

    step('scale to 2 and see the replica bar follow');
    await page.getByRole('spinbutton', { name: 'Replicas' }).fill('2');
    await page.getByRole('button', { name: 'Scale', exact: true }).click();
    await page.getByRole('meter', { name: '2 of 2 replicas ready' }).first().waitFor(WAIT);

    step('edit it, then roll back to revision 1 and read the diff');
    await page.getByRole('button', { name: 'Edit spec' }).click();
    const editor = page.getByRole('textbox', { name: 'Spec (JSON)' });
    const spec = JSON.parse(await editor.inputValue());
    spec.labels = { ...(spec.labels || {}), team: 'portal' };
    await editor.fill(JSON.stringify(spec, null, 2));
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForFunction(
      async ([p, n, t]) => {
        const r = await fetch(`/api/v1/projects/${p}/deployments/${n}`, { headers: { Authorization: `Bearer ${t}` } });
        return (await r.json()).spec.labels?.team === 'portal';
      },
      [PROJECT, NAME, TOKEN],
      WAIT,
    );
    await page.getByRole('button', { name: 'Roll back to revision 1' }).click();
    await page.getByRole('dialog').getByRole('button', { name: /Roll back/ }).click();
    await page.waitForFunction(
      async ([p, n, t]) => {
        const r = await fetch(`/api/v1/projects/${p}/deployments/${n}`, { headers: { Authorization: `Bearer ${t}` } });
        const d = await r.json();
        return d.generation >= 4 && !d.spec.labels?.team;
      },
      [PROJECT, NAME, TOKEN],
      WAIT,
    );
    await page.getByLabel('From revision', { exact: true }).selectOption('1');
    await page.getByLabel('To revision', { exact: true }).selectOption('3');
    const diff = await page.locator('.diff').first().innerText();
    assert.match(diff, /\+.*"team": "portal"/, `the diff shows the added label:\n${diff}`);

    step('a viewer sees the deployment but no edit controls');
    const viewerPage = await newPage();
    await signIn(viewerPage, viewer.body.secret);
    await viewerPage.goto(`${BASE}/projects/${PROJECT}/deployments/${NAME}`);
    await viewerPage.locator('[data-phase]').first().waitFor(WAIT);
    for (const name of ['Scale', 'Delete', 'Edit spec', 'Restart']) {
      assert.equal(await viewerPage.getByRole('button', { name, exact: true }).count(), 0, `a viewer sees no ${name} button`);
    }
    assert.equal(await viewerPage.getByRole('button', { name: /Roll back/ }).count(), 0, 'a viewer sees no roll back button');
    await viewerPage.goto(`${BASE}/projects/${PROJECT}/deployments`);
    await viewerPage.getByRole('link', { name: NAME, exact: true }).waitFor(WAIT);
    assert.equal(await viewerPage.getByRole('link', { name: 'Create deployment' }).count(), 0, 'a viewer cannot create');

    step('a revoked token ends the session with a screen that says so');
    const tokens = await rest('GET', `/api/v1/projects/${PROJECT}/tokens`);
    const viewerId = tokens.body.items.find((t) => t.name === `${PROJECT}-viewer`).id;
    assert.equal((await rest('DELETE', `/api/v1/projects/${PROJECT}/tokens/${viewerId}`)).status, 200);
    // The open live stream notices (the server rechecks credentials every 2 s) and the page
    // signs out on the 401 that follows, without anyone clicking.
    await viewerPage.getByText('Your session ended').waitFor(WAIT);
    assert.equal(await viewerPage.evaluate(() => sessionStorage.getItem('modelplane.token')), null);

    step('the list shows it live; screenshot');
    await page.goto(`${BASE}/projects/${PROJECT}/deployments`);
    await page.getByRole('link', { name: NAME, exact: true }).waitFor(WAIT);
    await page.screenshot({ path: path.join(SHOTS, 'deployment-list.png'), fullPage: true });
    await accessible(page, 'the deployment list');
    // A narrow window: the table scrolls inside its frame, the controls wrap.
    await page.setViewportSize({ width: 420, height: 900 });
    await page.getByRole('link', { name: NAME, exact: true }).waitFor(WAIT);
    await page.screenshot({ path: path.join(SHOTS, 'deployment-list-narrow.png'), fullPage: true });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page does not scroll sideways at 420 px (${overflow} px too wide)`);
    await page.setViewportSize({ width: 1280, height: 900 });

    step('delete it with a typed confirmation and see it leave the list');
    await page.getByRole('link', { name: NAME, exact: true }).click();
    await page.getByRole('button', { name: 'Delete', exact: true }).click();
    const dialog = page.getByRole('dialog');
    // Keyboard: the dialog takes the focus; type the name, Enter confirms.
    await dialog.getByLabel('Deployment name').click();
    await page.keyboard.type(NAME);
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/projects/${PROJECT}/deployments`, WAIT);
    // The list shows it (Deleting) until the worker has removed its objects, then drops it
    // live; the empty state appears only once the list's starting state is complete.
    await page.getByText('No deployments in this project yet').waitFor(WAIT);
    assert.equal(await page.getByRole('link', { name: NAME, exact: true }).count(), 0);

    step('scale to zero: created through the form with a minimum of 0, its first request through the Gateway wakes it');
    await page.getByRole('link', { name: 'Create deployment' }).first().click();
    await page.getByRole('button', { name: /Simulator/ }).click();
    await page.getByLabel('Name', { exact: true }).fill('idle');
    await page.getByLabel('Model source').fill('hf://Qwen/Qwen2.5-0.5B-Instruct');
    await page.getByLabel('Replicas', { exact: true }).fill('0');
    await page.getByLabel(/Follow the load/).check();
    await page.getByLabel('Minimum replicas').fill('0');
    await page.getByLabel('Scale to zero after (seconds)').waitFor(WAIT);
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.waitForURL(`**/projects/${PROJECT}/deployments/idle`, WAIT);
    await page.locator('[data-phase="ScaledToZero"]').first().waitFor(WAIT);
    const autoscaling = page.getByTestId('autoscaling');
    await autoscaling.getByText(/goes to zero replicas; the first request then waits up to 600 s/).waitFor(WAIT);
    // A deployment at zero keeps its URL, once the Gateway has accepted its route.
    let idleBase = null;
    for (const until = Date.now() + WAIT.timeout; !idleBase; await new Promise((r) => setTimeout(r, 200))) {
      const idle = await rest('GET', `/api/v1/projects/${PROJECT}/deployments/idle`);
      idleBase = idle.body.status.endpoints.openaiBase;
      assert.ok(idleBase || Date.now() < until, `no URL at zero: ${JSON.stringify(idle.body.status.endpoints)}`);
    }
    // New deployments take model keys: without one the Gateway refuses (before waking it).
    const wake = (key) =>
      fetch(`${idleBase}/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
        body: JSON.stringify({ model: 'idle', prompt: 'wake up', max_tokens: 2 }),
      });
    const keyless = await wake(null);
    assert.equal(keyless.status, 401, await keyless.clone().text());
    const modelKey = await rest('POST', `/api/v1/projects/${PROJECT}/keys`, { name: 'e2e-app' });
    assert.equal(modelKey.status, 201);
    // From this process, not the page: the model answers on the Gateway's origin.
    const woken = await wake(modelKey.body.secret);
    assert.equal(woken.status, 200, await woken.clone().text());
    assert.ok((await woken.json()).choices[0].text, 'the model answered the request that woke it');
    await autoscaling.getByText(/0 → 1: a request arrived while scaled to zero/).first().waitFor(WAIT);
    await page.locator('[data-phase="Ready"]').first().waitFor(WAIT);
    await page.screenshot({ path: path.join(SHOTS, 'deployment-woken-from-zero.png'), fullPage: true });
    assert.equal((await rest('DELETE', `/api/v1/projects/${PROJECT}/deployments/idle`)).status, 202);

    step('an admin creates a model key (its secret shown once) and revokes it');
    await page.getByRole('link', { name: 'Tokens & access' }).click();
    await page.getByLabel('Key name').fill('chat-app');
    await page.getByLabel('Requests a minute').fill('600');
    await page.getByRole('button', { name: 'Create key' }).click();
    const keySecret = (await page.locator('code.secret').innerText()).trim();
    assert.match(keySecret, /^mpk_/);
    const keysListed = await rest('GET', `/api/v1/projects/${PROJECT}/keys?live=true`);
    assert.ok(
      keysListed.body.items.some((k) => k.name === 'chat-app' && keySecret.startsWith(k.prefix) && k.requestsPerMinute === 600),
      JSON.stringify(keysListed.body),
    );
    assert.ok(!JSON.stringify(keysListed.body).includes(keySecret), 'the secret is never listed');
    await accessible(page, 'the model keys section');
    await page.screenshot({ path: path.join(SHOTS, 'model-key-created.png'), fullPage: true });
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('button', { name: 'Revoke chat-app' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('row', { name: /chat-app/ }).getByText(/^revoked /).waitFor(WAIT);

    step('an admin creates a token (its secret shown once), sees it in the audit log, revokes it');
    await page.getByRole('link', { name: 'Tokens & access' }).click();
    await page.getByLabel('Token name').fill('ci-deployer');
    await page.getByLabel('Role', { exact: true }).selectOption('editor');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = (await page.locator('code.secret').innerText()).trim();
    assert.match(secret, /^mpt_/);
    const who = await rest('GET', '/api/v1/whoami', undefined, secret);
    assert.equal(who.body.role, 'editor', 'the secret shown works as an editor token');
    await accessible(page, 'the tokens and access page');
    await page.getByRole('button', { name: 'Done' }).click();
    assert.equal(await page.locator('code.secret').count(), 0, 'the secret is gone after Done');
    await page.getByRole('cell', { name: 'token/ci-deployer' }).first().waitFor(WAIT);
    await page.getByRole('button', { name: 'Revoke ci-deployer' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
    const tokenRow = page.getByRole('region', { name: 'API tokens' }).getByRole('row', { name: /ci-deployer/ });
    await tokenRow.getByText(/^revoked /).waitFor(WAIT);
    assert.equal((await rest('GET', '/api/v1/whoami', undefined, secret)).status, 401);
    await page.getByRole('link', { name: 'Deployments' }).click();

    step('each page has its own title');
    await expectTitle(page, `Deployments · ${PROJECT} · modelplane`);

    step('sign out');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API token', { exact: true }).waitFor(WAIT);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('modelplane.token')), null);
    await expectTitle(page, 'Sign in · modelplane');

    assert.deepEqual(outside, [], 'the portal asked nothing of any other origin');
    assert.deepEqual(errors, [], 'no script error on any page');
    console.error('portal end-to-end: all steps passed');
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

// What the portal's browser tests share: REST calls with a platform-admin token for set-up,
// step names on stderr, and the axe-core (npm) check of WCAG 2 A and AA on a screen.
const assert = require('node:assert/strict');
const fs = require('node:fs');

const AXE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/** A REST call to `base` with `token`, to set up what the portal does not do itself. */
async function rest(base, token, method, url, body) {
  const response = await fetch(base + url, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

function step(name) {
  console.error(`  - ${name}`);
}

/** No WCAG 2 A/AA violation on what the page shows now. */
async function accessible(page, screen) {
  // Evaluated through the DevTools protocol, which the page's CSP does not govern.
  await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, { runOnly: ['wcag2a', 'wcag2aa', 'wcag21aa'] });
    return result.violations.map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
  });
  assert.deepEqual(violations, [], `${screen} has accessibility problems`);
}

module.exports = { accessible, rest, step };

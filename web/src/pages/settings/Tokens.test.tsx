import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch } from '../../test/render';
import { Tokens } from './Tokens';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;
const base = { role: 'viewer', createdBy: 'token:admin', createdAt: '2026-01-01T10:00:00Z', project: 'team-a' };

describe('Tokens', () => {
  it('loads more pages with the cursor, and shows revoked and expired tokens as such', async () => {
    const calls = stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/tokens' || method !== 'GET') return undefined;
      if (url.searchParams.get('cursor') === 'c2')
        return json({ items: [{ ...base, id: 't3', name: 'old', expiresAt: '2020-01-01T00:00:00Z' }], nextCursor: null });
      return json({
        items: [
          { ...base, id: 't1', name: 'live', expiresAt: '2999-01-01T00:00:00Z' },
          { ...base, id: 't2', name: 'gone', revokedAt: '2026-02-01T00:00:00Z' },
        ],
        nextCursor: 'c2',
      });
    });
    renderAt(...PAGE, <Tokens project="team-a" />);
    const user = userEvent.setup();
    expect(await screen.findByRole('button', { name: 'Revoke live' })).toBeInTheDocument();
    const gone = screen.getByRole('row', { name: /gone/ });
    expect(within(gone).getByText(/^revoked /)).toBeInTheDocument();
    expect(within(gone).queryByRole('button')).toBeNull();

    await user.click(screen.getByRole('button', { name: 'Load more' }));
    const old = await screen.findByRole('row', { name: /old/ });
    expect(within(old).getByText('expired')).toBeInTheDocument();
    expect(within(old).queryByRole('button')).toBeNull();
    expect(calls.some((c) => c.url.searchParams.get('cursor') === 'c2')).toBe(true);
    expect(screen.queryByRole('button', { name: 'Load more' })).toBeNull();
  });

  it('sends the chosen role and expiry, moves focus to the secret, and Done returns it to the form', async () => {
    const calls = stubFetch(ADMIN, ({ method, url, body }) => {
      if (url.pathname !== '/api/v1/projects/team-a/tokens') return undefined;
      if (method === 'GET') return json({ items: [], nextCursor: null });
      const b = body as { name: string; role: string };
      return json({ ...base, ...b, id: 'n1', secret: 'mpt_new_secret' }, 201);
    });
    renderAt(...PAGE, <Tokens project="team-a" />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Token name'), 'ci-deployer');
    await user.selectOptions(screen.getByLabelText('Role'), 'admin');
    await user.type(screen.getByLabelText('Expires'), '2099-03-04');
    await user.click(screen.getByRole('button', { name: 'Create token' }));

    const heading = await screen.findByRole('heading', { name: 'Token ci-deployer created' });
    expect(heading).toHaveFocus();
    expect(screen.getByRole('button', { name: 'Copy secret: mpt_new_secret' })).toBeInTheDocument();
    const sent = calls.find((c) => c.method === 'POST')!.body as { name: string; role: string; expiresAt: string };
    expect(sent).toMatchObject({ name: 'ci-deployer', role: 'admin' });
    // "Works through that day", in the browser's time zone.
    expect(new Date(sent.expiresAt).getTime()).toBe(new Date(2099, 2, 4, 23, 59, 59).getTime());

    await user.click(screen.getByRole('button', { name: 'Done' }));
    expect(screen.queryByText('mpt_new_secret')).toBeNull();
    expect(screen.getByLabelText('Token name')).toHaveFocus();
  });

  it('shows a conflict next to the name, and other failures as an alert', async () => {
    let answer = 409;
    stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/tokens') return undefined;
      if (method === 'GET') return json({ items: [], nextCursor: null });
      if (answer === 409)
        return json({ type: 'c', title: 'Conflict', status: 409, detail: 'dup', errors: [{ field: 'name', message: 'a live token named `ci` already exists' }] }, 409);
      return json({ type: 'x', title: 'Service unavailable', status: 503, detail: 'the database is not reachable' }, 503);
    });
    renderAt(...PAGE, <Tokens project="team-a" />);
    const user = userEvent.setup();
    const name = await screen.findByLabelText('Token name');
    await user.type(name, 'ci');
    await user.click(screen.getByRole('button', { name: 'Create token' }));
    expect(await screen.findByText('a live token named `ci` already exists')).toBeInTheDocument();
    expect(name).toHaveAttribute('aria-invalid', 'true');

    answer = 503;
    await user.click(screen.getByRole('button', { name: 'Create token' }));
    expect(await screen.findByText(/the database is not reachable/)).toBeInTheDocument();
    expect(name).not.toHaveAttribute('aria-invalid');
  });
});

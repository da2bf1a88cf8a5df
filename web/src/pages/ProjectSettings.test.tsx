import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch, viewerOf } from '../test/render';
import { ProjectSettings } from './ProjectSettings';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;
const USAGE = { from: '2026-10-27', to: '2026-11-25', gpuHours: 0, requests: 0, tokens: 0, deployments: [], daily: [] };
const token = { id: 't1', name: 'ci', role: 'editor', createdBy: 'token:admin', createdAt: '2026-11-24T10:00:00Z', project: 'team-a' };

describe('ProjectSettings', () => {
  it('shows a new token’s secret once, and Done forgets it', async () => {
    const calls = stubFetch(ADMIN, ({ method, url, body }) => {
      if (url.pathname === '/api/v1/projects/team-a/tokens' && method === 'GET') return json({ items: [], nextCursor: null });
      if (url.pathname === '/api/v1/projects/team-a/tokens' && method === 'POST') {
        const name = (body as { name: string }).name;
        if (name === 'bad name')
          return json({ type: 'x', title: 'Invalid input', status: 422, detail: 'name: invalid', errors: [{ field: 'name', message: 'letters, digits, . _ - only' }] }, 422);
        return json({ ...token, name, secret: 'mpt_secret_value' }, 201);
      }
      if (url.pathname.endsWith('/role-bindings') || url.pathname.endsWith('/audit')) return json({ items: [], nextCursor: null });
      if (url.pathname.endsWith('/usage')) return json(USAGE);
      return undefined;
    });
    renderAt(...PAGE, <ProjectSettings />);
    const user = userEvent.setup();
    const name = await screen.findByLabelText('Token name');
    await user.type(name, 'bad name');
    await user.click(screen.getByRole('button', { name: 'Create token' }));
    expect(await screen.findByText('letters, digits, . _ - only')).toBeInTheDocument();
    expect(name).toHaveAccessibleDescription(expect.stringContaining('letters, digits, . _ - only'));

    await user.clear(name);
    await user.type(name, 'ci');
    await user.click(screen.getByRole('button', { name: 'Create token' }));
    expect(await screen.findByText('mpt_secret_value')).toBeInTheDocument();
    expect(screen.getByText(/shown only once/)).toBeInTheDocument();
    expect(calls.filter((c) => c.method === 'POST').at(-1)!.body).toMatchObject({ name: 'ci', role: 'viewer' });
    await user.click(screen.getByRole('button', { name: 'Done' }));
    expect(screen.queryByText('mpt_secret_value')).toBeNull();
    expect(sessionStorage.getItem('modelplane.token')).toBe('mpt_test_token'); // the secret is stored nowhere
  });

  it('revokes a token after confirmation', async () => {
    const calls = stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname === '/api/v1/projects/team-a/tokens' && method === 'GET') return json({ items: [token], nextCursor: null });
      if (url.pathname === '/api/v1/projects/team-a/tokens/t1' && method === 'DELETE') return json({ ...token, revokedAt: '2026-11-24T11:00:00Z' });
      if (url.pathname.endsWith('/role-bindings') || url.pathname.endsWith('/audit')) return json({ items: [], nextCursor: null });
      if (url.pathname.endsWith('/usage')) return json(USAGE);
      return undefined;
    });
    renderAt(...PAGE, <ProjectSettings />);
    const user = userEvent.setup();
    await user.click(await screen.findByRole('button', { name: 'Revoke ci' }));
    const dialog = screen.getByRole('dialog');
    await user.click(within(dialog).getByRole('button', { name: 'Revoke' }));
    await vi.waitFor(() => expect(calls.some((c) => c.method === 'DELETE' && c.url.pathname.endsWith('/tokens/t1'))).toBe(true));
  });

  it('tells a non-admin they need the admin role', async () => {
    stubFetch(viewerOf('team-a'), () => undefined);
    renderAt(...PAGE, <ProjectSettings />);
    expect(await screen.findByText('You need the admin role on team-a to manage its tokens and access')).toBeInTheDocument();
  });
});

import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch } from '../../test/render';
import { ModelKeys } from './ModelKeys';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;
const base = { project: 'team-a', createdBy: 'token:admin', createdAt: '2026-01-01T10:00:00Z', prefix: 'mpk_AbCdEfGh' };

describe('ModelKeys', () => {
  it('lists scope, limits and state; a revoked key offers no button', async () => {
    stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname === '/api/v1/projects/team-a/keys/k1/usage' && url.searchParams.get('days') === '30')
        return json({ keyId: 'k1', key: 'chat-app', from: '2026-10-30', to: '2026-11-28', requests: 1234, tokens: 56789, daily: [], deployments: [] });
      if (url.pathname.endsWith('/usage')) return json({ keyId: 'k2', key: 'old', from: '2026-10-30', to: '2026-11-28', requests: 0, tokens: 0, daily: [], deployments: [] });
      if (url.pathname !== '/api/v1/projects/team-a/keys' || method !== 'GET') return undefined;
      return json({
        items: [
          { ...base, id: 'k1', name: 'chat-app', deployments: ['qwen'], requestsPerMinute: 600, maxConcurrent: 8, dailyTokenBudget: 1000000 },
          { ...base, id: 'k2', name: 'old', deployments: null, revokedAt: '2026-02-01T00:00:00Z' },
        ],
        nextCursor: null,
      });
    });
    renderAt(...PAGE, <ModelKeys project="team-a" />);
    const live = await screen.findByRole('row', { name: /chat-app/ });
    expect(within(live).getByText('qwen')).toBeInTheDocument();
    expect(within(live).getByText(/600 requests\/min, 8 at once/)).toBeInTheDocument();
    expect(within(live).getByText('mpk_AbCdEfGh…')).toBeInTheDocument();
    expect(within(live).getByRole('button', { name: 'Revoke chat-app' })).toBeInTheDocument();
    expect(await within(live).findByText((1234).toLocaleString())).toBeInTheDocument();
    expect(within(live).getByText((56789).toLocaleString())).toBeInTheDocument();
    const old = screen.getByRole('row', { name: /old/ });
    expect(within(old).getByText('every deployment')).toBeInTheDocument();
    expect(within(old).getByText(/^revoked /)).toBeInTheDocument();
    expect(within(old).queryByRole('button')).toBeNull();
  });

  it('sends the scope and limits, shows the secret once with focus, and names a wrong deployment', async () => {
    let fail = true;
    const calls = stubFetch(ADMIN, ({ method, url, body }) => {
      if (url.pathname.endsWith('/usage')) return json({ keyId: 'n1', key: 'chat-app', from: '2026-10-30', to: '2026-11-28', requests: 0, tokens: 0, daily: [], deployments: [] });
      if (url.pathname !== '/api/v1/projects/team-a/keys') return undefined;
      if (method === 'GET') return json({ items: [], nextCursor: null });
      if (fail) {
        fail = false;
        return json(
          { type: 'v', title: 'Invalid', status: 422, detail: 'bad', errors: [{ field: 'deployments[1]', message: 'project `team-a` has no deployment `ghost`' }] },
          422,
        );
      }
      return json({ ...base, ...(body as object), id: 'n1', secret: 'mpk_new_secret' }, 201);
    });
    renderAt(...PAGE, <ModelKeys project="team-a" />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Key name'), 'chat-app');
    await user.type(screen.getByLabelText('Deployments'), 'qwen, ghost');
    await user.type(screen.getByLabelText('Requests a minute'), '600');
    await user.type(screen.getByLabelText('Requests at once'), '8');
    await user.click(screen.getByRole('button', { name: 'Create key' }));
    expect(await screen.findByText('project `team-a` has no deployment `ghost`')).toBeInTheDocument();
    const sent = calls.find((c) => c.method === 'POST')!.body;
    expect(sent).toEqual({ name: 'chat-app', deployments: ['qwen', 'ghost'], requestsPerMinute: 600, maxConcurrent: 8 });

    await user.clear(screen.getByLabelText('Deployments'));
    await user.type(screen.getByLabelText('Deployments'), 'qwen');
    await user.click(screen.getByRole('button', { name: 'Create key' }));
    const heading = await screen.findByRole('heading', { name: 'Model key chat-app created' });
    expect(heading).toHaveFocus();
    expect(screen.getByRole('button', { name: 'Copy key: mpk_new_secret' })).toBeInTheDocument();
    await user.click(screen.getByRole('button', { name: 'Done' }));
    expect(screen.queryByText('mpk_new_secret')).toBeNull();
    expect(screen.getByLabelText('Key name')).toHaveFocus();
  });
});

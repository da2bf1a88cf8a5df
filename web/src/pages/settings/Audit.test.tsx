import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch } from '../../test/render';
import { Audit } from './Audit';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;
const event = (id: number) => ({
  id,
  kind: 'TokenCreated',
  target: `token/t${id}`,
  message: `token t${id} created`,
  actor: 'token:admin',
  createdAt: new Date(Date.UTC(2026, 0, 1, 0, id)).toISOString(),
});

describe('Audit', () => {
  it('reads every page (the API lists oldest first) and shows the newest first', async () => {
    // 120 events over two pages; the newest (120) is on the last one.
    const calls = stubFetch(ADMIN, ({ url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/audit') return undefined;
      const from = url.searchParams.get('cursor') === 'p2' ? 101 : 1;
      const to = from === 1 ? 100 : 120;
      const items = Array.from({ length: to - from + 1 }, (_, i) => event(from + i));
      return json({ items, nextCursor: from === 1 ? 'p2' : null });
    });
    renderAt(...PAGE, <Audit project="team-a" />);
    const user = userEvent.setup();
    const table = await screen.findByRole('table');
    let rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(50);
    expect(rows[0]).toHaveTextContent('token/t120');
    expect(rows[49]).toHaveTextContent('token/t71');
    expect(calls.filter((c) => c.url.pathname.endsWith('/audit')).map((c) => c.url.searchParams.get('cursor'))).toEqual([null, 'p2']);

    await user.click(screen.getByRole('button', { name: 'Show older events' }));
    await user.click(screen.getByRole('button', { name: 'Show older events' }));
    rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(120);
    expect(rows[119]).toHaveTextContent('token/t1');
    expect(screen.queryByRole('button', { name: 'Show older events' })).toBeNull();
  });

  it('says when nothing is recorded, and shows an error with the API’s words', async () => {
    let fail = false;
    stubFetch(ADMIN, ({ url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/audit') return undefined;
      if (fail) return json({ type: 'f', title: 'Forbidden', status: 403, detail: 'you need the admin role on team-a' }, 403);
      return json({ items: [], nextCursor: null });
    });
    const first = renderAt(...PAGE, <Audit project="team-a" />);
    expect(await screen.findByText('Nothing recorded yet.')).toBeInTheDocument();
    first.unmount();

    fail = true;
    renderAt(...PAGE, <Audit project="team-a" />);
    expect(await screen.findByRole('alert')).toHaveTextContent('you need the admin role on team-a');
  });
});

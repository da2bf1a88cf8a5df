import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch } from '../../test/render';
import { RoleBindings } from './RoleBindings';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;
const binding = { id: 'b1', subjectKind: 'group', subject: 'ml-team', role: 'editor', createdBy: 'token:admin', createdAt: '2026-01-01T10:00:00Z' };

describe('RoleBindings', () => {
  it('adds a binding, and shows a conflict next to the subject', async () => {
    const calls = stubFetch(ADMIN, ({ method, url, body }) => {
      if (url.pathname !== '/api/v1/projects/team-a/role-bindings') return undefined;
      if (method === 'GET') return json({ items: [], nextCursor: null });
      if ((body as { subject: string }).subject === 'ml-team')
        return json({ type: 'c', title: 'Conflict', status: 409, detail: 'x', errors: [{ field: 'subject', message: 'group `ml-team` already has a role' }] }, 409);
      return json({ ...binding, ...(body as object), id: 'b2' }, 201);
    });
    renderAt(...PAGE, <RoleBindings project="team-a" />);
    const user = userEvent.setup();
    expect(await screen.findByText(/No role bindings/)).toBeInTheDocument();
    const subject = screen.getByLabelText('Subject');
    await user.type(subject, 'ml-team');
    await user.click(screen.getByRole('button', { name: 'Add binding' }));
    expect(await screen.findByText('group `ml-team` already has a role')).toBeInTheDocument();
    expect(subject).toHaveAccessibleDescription(expect.stringContaining('already has a role'));

    await user.selectOptions(screen.getByLabelText('Subject kind'), 'user');
    await user.clear(subject);
    await user.type(subject, 'alice');
    await user.selectOptions(screen.getByLabelText('Binding role'), 'admin');
    await user.click(screen.getByRole('button', { name: 'Add binding' }));
    await vi.waitFor(() => expect(subject).toHaveValue(''));
    expect(calls.filter((c) => c.method === 'POST').at(-1)!.body).toEqual({ subjectKind: 'user', subject: 'alice', role: 'admin' });
    // Success refetches the list.
    await vi.waitFor(() => expect(calls.filter((c) => c.method === 'GET' && c.url.pathname.endsWith('/role-bindings')).length).toBe(2));
  });

  it('removes a binding only after confirmation', async () => {
    const calls = stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname === '/api/v1/projects/team-a/role-bindings' && method === 'GET') return json({ items: [binding], nextCursor: null });
      if (url.pathname === '/api/v1/projects/team-a/role-bindings/b1' && method === 'DELETE') return new Response(null, { status: 204 });
      return undefined;
    });
    renderAt(...PAGE, <RoleBindings project="team-a" />);
    const user = userEvent.setup();
    await user.click(await screen.findByRole('button', { name: 'Remove ml-team' }));
    await user.click(within(screen.getByRole('dialog')).getByRole('button', { name: 'Cancel' }));
    expect(screen.queryByRole('dialog')).toBeNull();
    expect(calls.some((c) => c.method === 'DELETE')).toBe(false);

    await user.click(screen.getByRole('button', { name: 'Remove ml-team' }));
    const dialog = screen.getByRole('dialog', { name: "Remove group ml-team's editor role?" });
    await user.click(within(dialog).getByRole('button', { name: 'Remove' }));
    await vi.waitFor(() => expect(calls.some((c) => c.method === 'DELETE' && c.url.pathname.endsWith('/role-bindings/b1'))).toBe(true));
  });
});

import { fireEvent, render, screen, waitFor } from '@testing-library/react';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { MemoryRouter, Route, Routes, useParams } from 'react-router';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AuthGate, AuthProvider } from '../auth/AuthProvider';
import { session } from '../auth/session';
import { ADMIN, json } from '../test/render';
import { Layout } from './Layout';

function Deployments() {
  const { project } = useParams();
  return <h1>Deployments of {project}</h1>;
}

function renderLayout() {
  vi.stubGlobal(
    'fetch',
    vi.fn(async (input: RequestInfo | URL) => {
      const url = new URL(input instanceof Request ? input.url : String(input), 'http://portal.test');
      if (url.pathname === '/api/v1/whoami') return json(ADMIN);
      if (url.pathname === '/api/v1/projects')
        return json({ items: ['team-a', 'team-b', 'team-c'].map((name) => ({ name })), nextCursor: null });
      throw new Error(`unexpected ${url.pathname}`);
    }),
  );
  session.signIn('mpt_test_token');
  render(
    <QueryClientProvider client={new QueryClient({ defaultOptions: { queries: { retry: false } } })}>
      <MemoryRouter initialEntries={['/projects/team-a/deployments']}>
        <AuthProvider>
          <AuthGate>
            <Routes>
              <Route element={<Layout />}>
                <Route path="projects/:project/deployments" element={<Deployments />} />
              </Route>
            </Routes>
          </AuthGate>
        </AuthProvider>
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

afterEach(() => vi.unstubAllGlobals());

describe('Layout', () => {
  it('the project switcher goes on a pick or Enter, never while arrowing through it', async () => {
    renderLayout();
    await screen.findByRole('option', { name: 'team-c' });
    const switcher = screen.getByRole('combobox');
    // Arrowing through the closed select: the choice moves, the page stays.
    fireEvent.keyDown(switcher, { key: 'ArrowDown' });
    fireEvent.change(switcher, { target: { value: 'team-b' } });
    expect(screen.getByRole('heading', { name: 'Deployments of team-a' })).toBeTruthy();
    // Enter goes there, and the focus moves to the new page's heading.
    fireEvent.keyDown(switcher, { key: 'Enter' });
    const heading = await screen.findByRole('heading', { name: 'Deployments of team-b' });
    await waitFor(() => expect(document.activeElement).toBe(heading));
    // A pick with the pointer goes at once.
    fireEvent.change(switcher, { target: { value: 'team-c' } });
    await screen.findByRole('heading', { name: 'Deployments of team-c' });
    // Arrowed away and left without Enter: the current project comes back.
    fireEvent.keyDown(switcher, { key: 'ArrowUp' });
    fireEvent.change(switcher, { target: { value: 'team-b' } });
    fireEvent.blur(switcher);
    expect((switcher as HTMLSelectElement).value).toBe('team-c');
    expect(screen.getByRole('heading', { name: 'Deployments of team-c' })).toBeTruthy();
  });
});

import { render, screen } from '@testing-library/react';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, stubFetch } from '../test/render';
import { ProjectQuota } from './ProjectQuota';

afterEach(() => vi.unstubAllGlobals());

describe('ProjectQuota', () => {
  it('reads the quota again when the project’s specs change, not before', async () => {
    let used = 2;
    const calls = stubFetch(ADMIN, ({ url }) =>
      url.pathname === '/api/v1/projects/team-a/quota'
        ? json({ replicas: { limit: 10, used }, gpus: [], requested: [] })
        : undefined,
    );
    const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    const at = (changes?: string) => (
      <QueryClientProvider client={client}>
        <ProjectQuota project="team-a" changes={changes} />
      </QueryClientProvider>
    );
    const view = render(at(undefined));
    const bar = await screen.findByRole('progressbar', { name: 'Replicas' });
    expect(bar).toHaveAttribute('aria-valuenow', '2');
    view.rerender(at('a:1'));
    view.rerender(at('a:1'));
    used = 3;
    view.rerender(at('a:2'));
    await vi.waitFor(() => expect(screen.getByRole('progressbar', { name: 'Replicas' })).toHaveAttribute('aria-valuenow', '3'));
    expect(calls.filter((c) => c.url.pathname.endsWith('/quota'))).toHaveLength(2);
  });
});

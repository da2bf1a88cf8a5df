import { act, renderHook, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, deployment, json, renderAt, sse, stubFetch, viewerOf } from '../test/render';
import { DeploymentList, useNow } from './DeploymentList';

const qwen = deployment('qwen', { labels: { team: 'nlp' }, resources: { gpu: { count: 2 } }, replicas: 3 }, {
  phase: 'Deploying',
  message: 'rolling out: 1/3 replicas available',
  replicas: { desired: 3, updated: 3, ready: 1, available: 1 },
});
const chat = deployment('chat', { labels: { team: 'web' } });

const NO_QUOTA = { replicas: { limit: null, used: 4 }, gpus: [], requested: [] };

function watchWith(...items: unknown[]) {
  return watchWithQuota(NO_QUOTA, ...items);
}

function watchWithQuota(quota: unknown, ...items: unknown[]) {
  return stubFetch(ADMIN, ({ url }) =>
    url.pathname === '/api/v1/projects/team-a/watch'
      ? sse(items.map((d) => ({ event: 'state', data: d })))
      : url.pathname === '/api/v1/projects/team-a/quota'
        ? json(quota)
        : undefined,
  );
}

afterEach(() => vi.unstubAllGlobals());

describe('DeploymentList', () => {
  it('shows every deployment from the watch stream with phase, replicas, GPUs, cause and URL', async () => {
    watchWith(qwen, chat);
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    const row = (await screen.findByRole('link', { name: 'qwen' })).closest('tr')!;
    expect(within(row).getByText('Deploying')).toBeInTheDocument();
    expect(within(row).getByText('rolling out: 1/3 replicas available')).toHaveClass('cause');
    expect(within(row).getByRole('meter', { name: '1 of 3 replicas ready' })).toBeInTheDocument();
    expect(within(row).getByText('6')).toBeInTheDocument(); // 2 GPUs × 3 replicas
    expect(within(row).getByRole('button', { name: 'Copy URL: http://gw/team-a/qwen' })).toBeInTheDocument();
    // A Ready deployment shows no cause and needs no GPU.
    const ready = screen.getByRole('link', { name: 'chat' }).closest('tr')!;
    expect(within(ready).getAllByRole('cell')[3]).toHaveTextContent(/^—$/); // GPUs
    expect(within(ready).queryByText(/rolling out/)).toBeNull();
    // Sorted by name.
    const names = screen.getAllByRole('link').map((a) => a.textContent).filter((t) => t === 'chat' || t === 'qwen');
    expect(names).toEqual(['chat', 'qwen']);
  });

  it('filters by phase, label and name', async () => {
    watchWith(qwen, chat);
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    await screen.findByRole('link', { name: 'qwen' });
    const user = userEvent.setup();
    await user.selectOptions(screen.getByLabelText('Phase'), 'Ready');
    expect(screen.queryByRole('link', { name: 'qwen' })).toBeNull();
    expect(screen.getByRole('link', { name: 'chat' })).toBeInTheDocument();
    await user.selectOptions(screen.getByLabelText('Phase'), '');
    await user.type(screen.getByLabelText('Label'), 'team=nlp');
    expect(screen.getByRole('link', { name: 'qwen' })).toBeInTheDocument();
    expect(screen.queryByRole('link', { name: 'chat' })).toBeNull();
    await user.clear(screen.getByLabelText('Label'));
    await user.type(screen.getByLabelText('Name'), 'cha');
    expect(screen.getByRole('link', { name: 'chat' })).toBeInTheDocument();
    expect(screen.queryByRole('link', { name: 'qwen' })).toBeNull();
    await user.type(screen.getByLabelText('Name'), 'zzz');
    expect(screen.getByText('No deployment matches these filters')).toBeInTheDocument();
  });

  it('offers creation to editors only', async () => {
    stubFetch(viewerOf('team-a'), ({ url }) =>
      url.pathname.endsWith('/watch') ? sse([{ event: 'state', data: chat }]) : url.pathname.endsWith('/quota') ? json(NO_QUOTA) : undefined,
    );
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    await screen.findByRole('link', { name: 'chat' });
    expect(screen.queryByRole('link', { name: 'Create deployment' })).toBeNull();
  });

  it('shows a signed-in person the controls their role bindings allow, as the API says', async () => {
    const alice = { name: 'user:alice', kind: 'user', platformAdmin: false, groups: ['nlp'], project: null, role: null };
    for (const [role, offered] of [
      ['viewer', false],
      ['editor', true],
    ] as const) {
      const calls = stubFetch(alice, ({ url }) =>
        url.pathname === '/api/v1/projects/team-a/me'
          ? json({ project: 'team-a', name: 'user:alice', role, via: 'role-binding' })
          : url.pathname.endsWith('/watch')
            ? sse([{ event: 'state', data: chat }])
            : url.pathname.endsWith('/quota')
              ? json(NO_QUOTA)
              : undefined,
      );
      const { unmount } = renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
      await screen.findByRole('link', { name: 'chat' });
      await waitFor(() => expect(calls.some((c) => c.url.pathname === '/api/v1/projects/team-a/me')).toBe(true));
      if (offered) expect(await screen.findByRole('link', { name: 'Create deployment' })).toBeTruthy();
      else expect(screen.queryByRole('link', { name: 'Create deployment' })).toBeNull();
      unmount();
      vi.unstubAllGlobals();
    }
  });

  it('"updated … ago" moves on with the clock, not only with new data', () => {
    vi.useFakeTimers();
    try {
      const { result } = renderHook(() => useNow(15_000));
      const first = result.current;
      act(() => vi.advanceTimersByTime(15_000));
      expect(result.current - first).toBe(15_000);
    } finally {
      vi.useRealTimers();
    }
  });

  it('says what to do next in an empty project', async () => {
    watchWith();
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    expect(await screen.findByText('No deployments in this project yet')).toBeInTheDocument();
    expect(await screen.findAllByRole('link', { name: 'Create deployment' })).not.toHaveLength(0);
  });

  it('shows each quota as used / limit bars, replicas too when limited', async () => {
    const calls = watchWithQuota(
      {
        replicas: { limit: 10, used: 3 },
        gpus: [
          { resourceName: 'nvidia.com/gpu', product: null, limit: 16, used: 8 },
          { resourceName: 'nvidia.com/gpu', product: 'NVIDIA-L4', limit: 4, used: 6 },
        ],
        requested: [{ resourceName: 'nvidia.com/gpu', product: null, gpus: 14 }],
      },
      qwen,
    );
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    const quota = await screen.findByRole('region', { name: 'Quota' });
    const replicas = within(quota).getByRole('progressbar', { name: 'Replicas' });
    expect(replicas).toHaveAttribute('aria-valuenow', '3');
    expect(replicas).toHaveAttribute('aria-valuemax', '10');
    const gpus = within(quota).getByRole('progressbar', { name: 'GPUs nvidia.com/gpu' });
    expect(gpus).toHaveAttribute('aria-valuenow', '8');
    expect(gpus).toHaveAttribute('aria-valuemax', '16');
    expect(gpus).toHaveAttribute('aria-valuetext', '8 of 16 used');
    // Over the limit (the quota was lowered): a full bar that says so.
    const l4 = within(quota).getByRole('progressbar', { name: 'GPUs nvidia.com/gpu · NVIDIA-L4' });
    expect(l4).toHaveAttribute('aria-valuenow', '4');
    expect(l4).toHaveAttribute('aria-valuetext', '6 of 4 used (over the limit)');
    expect(within(quota).getAllByTestId('quota-numbers').map((n) => n.textContent)).toEqual(['3 / 10', '8 / 16', '6 / 4 over the limit']);
    expect(within(quota).queryByTestId('quota-none')).toBeNull();
    expect(calls.filter((c) => c.url.pathname.endsWith('/quota'))).toHaveLength(1);
  });

  it('without a quota, shows the GPUs the project requests and “no quota”', async () => {
    watchWithQuota({ replicas: { limit: null, used: 3 }, gpus: [], requested: [{ resourceName: 'nvidia.com/gpu', product: null, gpus: 6 }] }, qwen);
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    const quota = await screen.findByRole('region', { name: 'Quota' });
    expect(within(quota).getByTestId('quota-none')).toHaveTextContent('nvidia.com/gpu: 6 GPUs requested · no quota');
    expect(within(quota).queryByRole('progressbar')).toBeNull();
  });
});

describe('DeploymentList — requests/s', () => {
  const LOAD = { asOf: '2026-11-24T10:00:00Z', stale: false, dialect: 'vllm', pods: 1, podsRead: 1, requestsPerSecond: 1.5 };

  it('shows requests/s now and a sparkline of the last hour, live; a dash without readings', async () => {
    const served = deployment('served', {}, { load: LOAD });
    const calls = stubFetch(ADMIN, ({ url }) => {
      if (url.pathname === '/api/v1/projects/team-a/watch')
        return sse([
          { event: 'state', data: served },
          { event: 'state', data: chat },
          { event: 'load', data: { id: 'id-served', name: 'served', load: { ...LOAD, requestsPerSecond: 2.25 }, canaryLoad: null } },
        ]);
      if (url.pathname === '/api/v1/projects/team-a/quota') return json(NO_QUOTA);
      if (url.pathname === '/api/v1/projects/team-a/deployments/served/metrics')
        return json({
          windowSeconds: 3600,
          stepSeconds: 60,
          resolutionSeconds: 15,
          timestamps: ['2026-11-24T09:58:00Z', '2026-11-24T09:59:00Z', '2026-11-24T10:00:00Z'],
          series: [{ name: 'requestsPerSecond', unit: 'req/s', values: [1, null, 2.25] }],
        });
      return undefined;
    });
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    const row = (await screen.findByRole('link', { name: 'served' })).closest('tr')!;
    expect(screen.getByRole('columnheader', { name: 'Requests/s' })).toBeInTheDocument();
    // The watch asked for load events; the newer reading is the one shown.
    expect(calls.find((c) => c.url.pathname.endsWith('/watch'))!.url.searchParams.get('load')).toBe('true');
    expect(await within(row).findByTestId('requests-now')).toHaveTextContent('2.25 req/s');
    expect(
      await within(row).findByRole('img', { name: 'Requests/s over the last hour: latest 2.25, lowest 1, highest 2.25' }),
    ).toBeInTheDocument();
    const spark = calls.find((c) => c.url.pathname.endsWith('/metrics'))!;
    expect(Object.fromEntries(spark.url.searchParams)).toEqual({ window: '1h', step: '1m', series: 'requestsPerSecond' });

    // Never read: a dash, and no metrics call for it.
    const unread = screen.getByRole('link', { name: 'chat' }).closest('tr')!;
    expect(within(unread).getByTestId('requests-none')).toHaveTextContent('— no readings yet');
    expect(calls.filter((c) => c.url.pathname.endsWith('/metrics'))).toHaveLength(1);
  });

  it('read but nothing measured (an engine without the figure): one dash, not one per part', async () => {
    const quiet = deployment('quiet', {}, { load: { ...LOAD, requestsPerSecond: null } });
    const calls = stubFetch(ADMIN, ({ url }) => {
      if (url.pathname === '/api/v1/projects/team-a/watch') return sse([{ event: 'state', data: quiet }]);
      if (url.pathname === '/api/v1/projects/team-a/quota') return json(NO_QUOTA);
      if (url.pathname === '/api/v1/projects/team-a/deployments/quiet/metrics')
        return json({
          windowSeconds: 3600,
          stepSeconds: 60,
          resolutionSeconds: 15,
          timestamps: ['2026-11-24T09:59:00Z', '2026-11-24T10:00:00Z'],
          series: [{ name: 'requestsPerSecond', unit: 'req/s', values: [null, null] }],
        });
      return undefined;
    });
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    const row = (await screen.findByRole('link', { name: 'quiet' })).closest('tr')!;
    await waitFor(() => expect(calls.some((c) => c.url.pathname.endsWith('/metrics'))).toBe(true));
    const cell = within(row).getByTestId('requests-now').closest('td')!;
    await waitFor(() => expect(cell.textContent).toBe('— not measured'));
    expect(within(row).queryByTestId('sparkline-none')).toBeNull();
  });
});

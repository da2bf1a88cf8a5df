import { screen, within } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch } from '../../test/render';
import { Usage } from './Usage';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/settings', '/projects/:project/settings'] as const;

describe('Usage', () => {
  it('shows the last 30 days’ GPU-hours and model tokens: total, by deployment (and role) and by day', async () => {
    const calls = stubFetch(ADMIN, ({ url }) =>
      url.pathname === '/api/v1/projects/team-a/usage'
        ? json({
            from: '2026-11-23',
            to: '2026-11-25',
            gpuHours: 12.5,
            requests: 1200,
            tokens: 450000,
            deployments: [
              { name: 'llama', role: null, resourceName: 'nvidia.com/gpu', product: 'NVIDIA-L4', gpuHours: 8 },
              { name: 'qwen', role: 'decode', resourceName: 'nvidia.com/gpu', product: null, gpuHours: 2.5 },
              { name: 'qwen', role: 'prefill', resourceName: 'nvidia.com/gpu', product: null, gpuHours: 2 },
            ],
            daily: [
              { date: '2026-11-23', gpuHours: 0, requests: 0, tokens: 0 },
              { date: '2026-11-24', gpuHours: 10, requests: 1000, tokens: 400000 },
              { date: '2026-11-25', gpuHours: 2.5, requests: 200, tokens: 50000 },
            ],
          })
        : undefined,
    );
    renderAt(...PAGE, <Usage project="team-a" />);
    expect(await screen.findByTestId('gpu-usage-total')).toHaveTextContent('12.5 GPU-hours');
    expect(calls.find((c) => c.url.pathname.endsWith('/usage'))!.url.searchParams.get('days')).toBe('30');
    const rows = within(screen.getByRole('table', { name: 'GPU-hours by deployment' })).getAllByRole('row').slice(1);
    // A disaggregated deployment's roles each have their own row.
    expect(rows.map((r) => r.textContent)).toEqual([
      'llamanvidia.com/gpu · NVIDIA-L48',
      'qwen (decode)nvidia.com/gpu2.5',
      'qwen (prefill)nvidia.com/gpu2',
    ]);
    const days = within(screen.getByRole('list', { name: 'By day' })).getAllByRole('listitem');
    expect(days.map((d) => d.textContent)).toEqual([
      '2026-11-2300 tokens',
      '2026-11-2410400,000 tokens',
      '2026-11-252.550,000 tokens',
    ]);
    expect(screen.getByTestId('model-usage-total')).toHaveTextContent('450,000 model tokens, 1,200 requests with model keys');
    // Each bar is as long as its day's share of the busiest day.
    expect((days[2]!.querySelector('.usage-day-bar > span') as HTMLElement).style.width).toBe('25%');
  });

  it('shows the API’s words when the usage cannot be read', async () => {
    stubFetch(ADMIN, ({ url }) =>
      url.pathname === '/api/v1/projects/team-a/usage'
        ? json({ type: 'f', title: 'Forbidden', status: 403, detail: 'you need the admin role on team-a' }, 403)
        : undefined,
    );
    renderAt(...PAGE, <Usage project="team-a" />);
    expect(await screen.findByRole('alert')).toHaveTextContent('you need the admin role on team-a');
  });
});

import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Deployment } from '../../api/client';
import { ADMIN, deployment, json, renderAt, stubFetch } from '../../test/render';
import { Replicas } from './Status';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/deployments/big', '/projects/:project/deployments/:name'] as const;
const big = deployment(
  'big',
  { replicas: 3, routing: { mode: 'InferencePool' }, disaggregation: { prefill: { replicas: 1 }, decode: { replicas: 2 } } },
  {
    phase: 'Deploying',
    replicas: { desired: 3, updated: 3, ready: 2, available: 2 },
    roles: [
      { role: 'prefill', replicas: { desired: 1, updated: 1, ready: 0, available: 0 }, message: '1 of 1 replicas starting' },
      { role: 'decode', replicas: { desired: 2, updated: 2, ready: 2, available: 2 }, message: '' },
    ],
  },
) as unknown as Deployment;

describe('Replicas of a disaggregated deployment', () => {
  it('shows each role and what holds it, without a whole-deployment scale', async () => {
    stubFetch(ADMIN, () => undefined);
    renderAt(...PAGE, <Replicas deployment={big} editable={false} />);
    const prefill = await screen.findByTestId('role-prefill');
    expect(within(prefill).getByText(/ready of 1/)).toBeInTheDocument();
    expect(within(prefill).getByText(/1 of 1 replicas starting/)).toBeInTheDocument();
    expect(within(screen.getByTestId('role-decode')).getByText(/ready of 2/)).toBeInTheDocument();
    expect(screen.queryByRole('spinbutton', { name: 'Replicas' })).toBeNull();
  });

  it('scales one role and names the field the API refused', async () => {
    let fail = true;
    const calls = stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/deployments/big/scale' || method !== 'POST') return undefined;
      if (fail) {
        fail = false;
        return json({ type: 'q', title: 'Quota', status: 422, detail: 'no', errors: [{ field: 'replicas', message: 'must be between 0 and 100' }] }, 422);
      }
      return json(big);
    });
    renderAt(...PAGE, <Replicas deployment={big} editable />);
    const user = userEvent.setup();
    expect(screen.queryByRole('spinbutton', { name: 'Replicas' })).toBeNull();
    const input = await screen.findByLabelText('Prefill replicas');
    await user.clear(input);
    await user.type(input, '500');
    await user.click(screen.getByRole('button', { name: 'Scale prefill' }));
    expect(await screen.findByText('must be between 0 and 100')).toBeInTheDocument();
    expect(input).toHaveAttribute('aria-invalid', 'true');
    expect(calls.find((c) => c.method === 'POST')!.body).toEqual({ replicas: 500, role: 'prefill' });
    await user.clear(input);
    await user.type(input, '2');
    await user.click(screen.getByRole('button', { name: 'Scale prefill' }));
    await vi.waitFor(() => expect(calls.filter((c) => c.method === 'POST')).toHaveLength(2));
    expect(calls.filter((c) => c.method === 'POST').at(-1)!.body).toEqual({ replicas: 2, role: 'prefill' });
  });
});

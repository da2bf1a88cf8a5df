import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Deployment } from '../../api/client';
import { ADMIN, deployment, json, renderAt, stubFetch } from '../../test/render';
import { Adapters } from './Adapters';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/deployments/qwen', '/projects/:project/deployments/:name'] as const;
const tuned = deployment(
  'qwen',
  { adapters: [{ name: 'sql-lora', source: 'hf://acme/sql-lora' }, { name: 'bad-lora', source: 'pvc://loras/bad' }] },
  {
    adapters: [
      { name: 'sql-lora', loaded: 2, pods: 2, message: '' },
      { name: 'bad-lora', loaded: 0, pods: 2, message: 'pod qwen-1: HTTP 400: rank 64 exceeds --max-lora-rank 16' },
    ],
  },
) as unknown as Deployment;

describe('Adapters', () => {
  it('shows on how many pods each adapter is loaded, and why not', async () => {
    stubFetch(ADMIN, () => undefined);
    renderAt(...PAGE, <Adapters deployment={tuned} editable={false} />);
    const sql = await screen.findByRole('row', { name: /sql-lora/ });
    expect(within(sql).getByText('2 of 2 pods')).toBeInTheDocument();
    const bad = screen.getByRole('row', { name: /bad-lora/ });
    expect(within(bad).getByText('0 of 2 pods')).toBeInTheDocument();
    expect(within(bad).getByText(/rank 64 exceeds/)).toBeInTheDocument();
    expect(screen.queryByRole('button')).toBeNull();
  });

  it('adds an adapter and names the field the API refused', async () => {
    let fail = true;
    const calls = stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/deployments/qwen/adapters' || method !== 'POST') return undefined;
      if (fail) {
        fail = false;
        return json(
          { type: 'v', title: 'Invalid', status: 422, detail: 'bad', errors: [{ field: 'source', message: 'adapters load at run time from hf://, pvc:// or s3://' }] },
          422,
        );
      }
      return json(tuned);
    });
    renderAt(...PAGE, <Adapters deployment={tuned} editable />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Model name'), 'chat-lora');
    await user.type(screen.getByLabelText('Source'), 'oci://registry/chat');
    // Only an s3:// source asks for credentials.
    expect(screen.queryByLabelText(/S3 credentials Secret/)).toBeNull();
    await user.click(screen.getByRole('button', { name: 'Add adapter' }));
    expect(await screen.findByText(/hf:\/\/, pvc:\/\/ or s3:\/\//)).toBeInTheDocument();
    expect(screen.getByLabelText('Source')).toHaveAttribute('aria-invalid', 'true');
    expect(calls.find((c) => c.method === 'POST')!.body).toEqual({ name: 'chat-lora', source: 'oci://registry/chat' });
    await user.clear(screen.getByLabelText('Source'));
    await user.type(screen.getByLabelText('Source'), 's3://loras/chat');
    await user.type(screen.getByLabelText(/S3 credentials Secret/), 'loras-s3');
    await user.click(screen.getByRole('button', { name: 'Add adapter' }));
    await vi.waitFor(() => expect(screen.getByLabelText('Model name')).toHaveValue(''));
    expect(calls.filter((c) => c.method === 'POST').at(-1)!.body).toEqual({
      name: 'chat-lora',
      source: 's3://loras/chat',
      secretRef: { name: 'loras-s3' },
    });
  });

  it('names the Secret field when the API refuses it', async () => {
    stubFetch(ADMIN, ({ method, url }) => {
      if (url.pathname !== '/api/v1/projects/team-a/deployments/qwen/adapters' || method !== 'POST') return undefined;
      return json(
        {
          type: 'v',
          title: 'Invalid',
          status: 422,
          detail: 'bad',
          errors: [{ field: 'secretRef.name', message: 'every s3:// adapter of a deployment is fetched with one Secret' }],
        },
        422,
      );
    });
    renderAt(...PAGE, <Adapters deployment={tuned} editable />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Model name'), 'x');
    await user.type(screen.getByLabelText('Source'), 's3://other/x');
    await user.type(screen.getByLabelText(/S3 credentials Secret/), 'other-s3');
    await user.click(screen.getByRole('button', { name: 'Add adapter' }));
    expect(await screen.findByText(/fetched with one Secret/)).toBeInTheDocument();
    expect(screen.getByLabelText(/S3 credentials Secret/)).toHaveAttribute('aria-invalid', 'true');
  });
});

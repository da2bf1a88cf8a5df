import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Route, Routes } from 'react-router';
import { ADMIN, deployment, json, renderAt, sse, stubFetch, viewerOf, type Handler } from '../test/render';
import { CreateDeployment } from './CreateDeployment';
import { DeploymentPage } from './DeploymentPage';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/deployments/new', '/projects/:project/deployments/new'] as const;

const A100 = {
  resourceName: 'nvidia.com/gpu',
  product: 'NVIDIA-A100-SXM4-80GB',
  nodes: 3,
  allocatable: 24,
  requested: 8,
  requestedByModelplane: 8,
  free: 16,
  largestFreeBlock: 8,
  largestNode: 8,
  unavailableNodes: [{ name: 'node-2', reason: 'cordoned' }],
};
const L4 = { ...A100, product: 'NVIDIA-L4', nodes: 2, allocatable: 8, requested: 0, requestedByModelplane: 0, free: 8, largestFreeBlock: 4, largestNode: 4, unavailableNodes: [] };
const CAPACITY = { observedAt: '2026-11-25T10:00:00Z', gpus: [A100, L4] };

/** Answers the capacity report with `report`, and the rest with `rest`. */
function withCapacity(report: unknown, rest: Handler = () => undefined): Handler {
  return (request) => (request.url.pathname === '/api/v1/capacity' ? json(report) : rest(request));
}

describe('CreateDeployment', () => {
  it('puts each API field error next to its field and keeps what was typed', async () => {
    const calls = stubFetch(ADMIN, withCapacity(CAPACITY, ({ method, url }) =>
      method === 'POST' && url.pathname === '/api/v1/projects/team-a/deployments'
        ? json(
            {
              type: 'urn:modelplane:problem:invalid-input',
              title: 'Invalid input',
              status: 422,
              detail: '2 fields are invalid',
              errors: [
                { field: 'spec.model.source', message: 'unsupported scheme `ftp://`' },
                { field: 'spec.storage.cache.sizeLimit', message: 'must be a quantity' },
              ],
            },
            422,
          )
        : undefined,
    ));
    renderAt(...PAGE, <CreateDeployment />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Name'), 'chat');
    const source = screen.getByLabelText('Model source');
    await user.clear(source);
    await user.type(source, 'ftp://x');
    await user.click(screen.getByRole('button', { name: 'Create' }));

    expect(await screen.findByText('unsupported scheme `ftp://`')).toBeInTheDocument();
    expect(source).toHaveAttribute('aria-invalid', 'true');
    expect(source).toHaveAccessibleDescription(expect.stringContaining('unsupported scheme `ftp://`'));
    // A field the form has no control for is listed at the top, by its path.
    expect(screen.getByText('spec.storage.cache.sizeLimit')).toBeInTheDocument();
    expect(source).toHaveValue('ftp://x');
    const post = calls.find((c) => c.method === 'POST')!;
    expect(post.body).toMatchObject({ name: 'chat', spec: { model: { source: 'ftp://x' }, engine: { kind: 'sim' } } });
  });

  it('offers autoscaling: its fields appear when it is on, are sent, and carry their API errors', async () => {
    const calls = stubFetch(ADMIN, withCapacity(CAPACITY, ({ method, url }) =>
      method === 'POST' && url.pathname === '/api/v1/projects/team-a/deployments'
        ? json(
            {
              type: 'urn:modelplane:problem:invalid-input',
              title: 'Invalid input',
              status: 422,
              detail: '1 field is invalid',
              errors: [{ field: 'spec.autoscaling.maxReplicas', message: 'must be at least minReplicas (3): it is 2' }],
            },
            422,
          )
        : undefined,
    ));
    renderAt(...PAGE, <CreateDeployment />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Name'), 'chat');
    expect(screen.queryByLabelText('Maximum replicas')).toBeNull();
    await user.click(screen.getByRole('checkbox', { name: /Follow the load/ }));
    await user.clear(screen.getByLabelText('Minimum replicas'));
    await user.type(screen.getByLabelText('Minimum replicas'), '3');
    await user.clear(screen.getByLabelText('Maximum replicas'));
    await user.type(screen.getByLabelText('Maximum replicas'), '2');
    await user.selectOptions(screen.getByLabelText('Scale on'), 'kvCacheUsage');
    await user.clear(screen.getByLabelText('Target per replica'));
    await user.type(screen.getByLabelText('Target per replica'), '0.8');
    await user.click(screen.getByRole('button', { name: 'Create' }));

    const max = screen.getByLabelText('Maximum replicas');
    expect(await screen.findByText('must be at least minReplicas (3): it is 2')).toBeInTheDocument();
    expect(max).toHaveAttribute('aria-invalid', 'true');
    const post = calls.find((c) => c.method === 'POST')!;
    expect(post.body).toMatchObject({
      spec: { autoscaling: { minReplicas: 3, maxReplicas: 2, target: { metric: 'kvCacheUsage', value: 0.8 } } },
    });
  });

  it('the curl panel shows the body the form sends', async () => {
    stubFetch(ADMIN, withCapacity(CAPACITY));
    renderAt(...PAGE, <CreateDeployment />);
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Name'), 'demo');
    await user.clear(screen.getByLabelText('Replicas'));
    await user.type(screen.getByLabelText('Replicas'), '2');
    const curl = screen.getByText(/curl -X POST/).textContent!;
    expect(curl).toContain('"name": "demo"');
    expect(curl).toContain('"replicas": 2');
    expect(curl).not.toContain('mpt_test_token');
  });

  it('tells a viewer they need the editor role instead of showing the form', async () => {
    stubFetch(viewerOf('team-a'), () => undefined);
    renderAt(...PAGE, <CreateDeployment />);
    expect(await screen.findByText('You need the editor role on team-a to create deployments')).toBeInTheDocument();
    expect(screen.queryByRole('button', { name: 'Create' })).toBeNull();
  });

  it('shows the free GPUs by resource and product beside the GPU fields', async () => {
    stubFetch(ADMIN, withCapacity(CAPACITY));
    renderAt(...PAGE, <CreateDeployment />);
    const free = await screen.findByRole('region', { name: 'Free GPUs' });
    const entries = await within(free).findAllByTestId('gpu-capacity-entry');
    expect(entries.map((e) => e.textContent)).toEqual([
      'nvidia.com/gpu · NVIDIA-A100-SXM4-80GB: 16 free of 24 (largest free block 8) · not counted: node-2 (cordoned)',
      'nvidia.com/gpu · NVIDIA-L4: 8 free of 8 (largest free block 4)',
    ]);
    // The products are offered in the product field.
    const options = [...document.querySelectorAll('#gpu-products option')].map((o) => (o as HTMLOptionElement).value);
    expect(options).toEqual(['NVIDIA-A100-SXM4-80GB', 'NVIDIA-L4']);
    expect(screen.getByLabelText('GPU product')).toHaveAttribute('list', 'gpu-products');
  });

  it('warns that a replica asking for more GPUs than any node has will never fit', async () => {
    stubFetch(ADMIN, withCapacity(CAPACITY));
    renderAt(...PAGE, <CreateDeployment />);
    const user = userEvent.setup();
    await screen.findAllByTestId('gpu-capacity-entry');
    await user.click(screen.getByRole('button', { name: /vLLM/ }));
    const gpus = screen.getByLabelText('GPUs');
    expect(screen.queryByTestId('gpu-fit-warning')).toBeNull(); // 1 GPU fits
    await user.clear(gpus);
    await user.type(gpus, '16');
    const warning = screen.getByTestId('gpu-fit-warning');
    expect(warning).toHaveTextContent('16 GPUs per replica will never fit: the largest node has 8. The server will refuse it.');
    expect(warning).toHaveAttribute('data-fit', 'never');
    expect(gpus).toHaveAccessibleDescription(expect.stringContaining('will never fit'));
    // Only the named product's nodes count: 8 fits an A100 node but no L4 node.
    await user.clear(gpus);
    await user.type(gpus, '8');
    expect(screen.queryByTestId('gpu-fit-warning')).toBeNull();
    await user.type(screen.getByLabelText('GPU product'), 'NVIDIA-L4');
    expect(screen.getByTestId('gpu-fit-warning')).toHaveTextContent('8 GPUs per replica will never fit: the largest node has 4.');
  });

  it('says when the cluster’s capacity is not known yet, and warns of nothing', async () => {
    stubFetch(ADMIN, withCapacity({ observedAt: null, gpus: [] }));
    renderAt(...PAGE, <CreateDeployment />);
    expect(await screen.findByTestId('gpu-capacity-unknown')).toHaveTextContent('The cluster’s GPU capacity is not known yet');
    const user = userEvent.setup();
    await user.click(screen.getByRole('button', { name: /vLLM/ }));
    await user.clear(screen.getByLabelText('GPUs'));
    await user.type(screen.getByLabelText('GPUs'), '64');
    expect(screen.queryByTestId('gpu-fit-warning')).toBeNull();
  });

  it('shows the warnings of the create response on the new deployment’s page', async () => {
    const warning = 'only 1 of 3 replicas fit on the free nvidia.com/gpu now (8 free on 1 Ready node; largest free block 8)';
    const created = deployment('big', { replicas: 3, resources: { gpu: { count: 8 } } });
    const base = '/api/v1/projects/team-a/deployments';
    stubFetch(
      ADMIN,
      withCapacity(CAPACITY, ({ method, url }) => {
        if (method === 'POST' && url.pathname === base) return json({ ...created, warnings: [warning] }, 201);
        if (url.pathname === `${base}/big/watch`) return sse([{ event: 'state', data: created }]);
        if (url.pathname === `${base}/big/events` || url.pathname === `${base}/big/revisions`) return json({ items: [], nextCursor: null });
        if (url.pathname === '/graphql') return json({ data: { deployment: { objects: [] } } });
        return undefined;
      }),
    );
    renderAt(
      '/projects/team-a/deployments/new',
      '/projects/:project/deployments/*',
      <Routes>
        <Route path="new" element={<CreateDeployment />} />
        <Route path=":name" element={<DeploymentPage />} />
      </Routes>,
    );
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Name'), 'big');
    await user.click(screen.getByRole('button', { name: 'Create' }));
    await screen.findByRole('heading', { name: 'big' });
    const notice = screen.getByTestId('create-warnings');
    expect(notice).toHaveTextContent('Created, with a warning from the server:');
    expect(within(notice).getByText(warning)).toBeInTheDocument();
    await user.click(within(notice).getByRole('button', { name: 'Dismiss' }));
    expect(screen.queryByTestId('create-warnings')).toBeNull();
  });
});

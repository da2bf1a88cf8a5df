import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, deployment, renderAt, sse, stubFetch, viewerOf } from '../test/render';
import { DeploymentList } from './DeploymentList';

const qwen = deployment('qwen', { labels: { team: 'nlp' }, resources: { gpu: { count: 2 } }, replicas: 3 }, {
  phase: 'Deploying',
  message: 'rolling out: 1/3 replicas available',
  replicas: { desired: 3, updated: 3, ready: 1, available: 1 },
});
const chat = deployment('chat', { labels: { team: 'web' } });

function watchWith(...items: unknown[]) {
  return stubFetch(ADMIN, ({ url }) =>
    url.pathname === '/api/v1/projects/team-a/watch' ? sse(items.map((d) => ({ event: 'state', data: d }))) : undefined,
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
    expect(within(ready).getByText('—')).toBeInTheDocument();
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
    stubFetch(viewerOf('team-a'), ({ url }) => (url.pathname.endsWith('/watch') ? sse([{ event: 'state', data: chat }]) : undefined));
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    await screen.findByRole('link', { name: 'chat' });
    expect(screen.queryByRole('link', { name: 'Create deployment' })).toBeNull();
  });

  it('says what to do next in an empty project', async () => {
    watchWith();
    renderAt('/projects/team-a/deployments', '/projects/:project/deployments', <DeploymentList />);
    expect(await screen.findByText('No deployments in this project yet')).toBeInTheDocument();
    expect(await screen.findAllByRole('link', { name: 'Create deployment' })).not.toHaveLength(0);
  });
});

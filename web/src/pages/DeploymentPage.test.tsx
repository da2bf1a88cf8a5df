import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, deployment, json, renderAt, sse, stubFetch, viewerOf, type Handler } from '../test/render';
import { FakePlot } from '../test/uplot';
import { DeploymentPage } from './DeploymentPage';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/deployments/qwen', '/projects/:project/deployments/:name'] as const;
const BASE = '/api/v1/projects/team-a/deployments/qwen';
const qwen = deployment('qwen', {}, {
  phase: 'Failed',
  message: 'image pull failed: vllm/vllm-openai:nope not found',
  conditions: [
    { type: 'Available', status: 'False', reason: 'ImagePullFailed', message: 'vllm/vllm-openai:nope not found', lastTransitionTime: '2026-11-24T10:00:00Z' },
  ],
});

/** The calls every deployment page makes, plus `extra` for the one under test. */
function backend(extra: Handler = () => undefined): Handler {
  return (request) => {
    const path = request.url.pathname;
    if (path === `${BASE}/watch`) return sse([{ event: 'state', data: qwen }]);
    if (path === `${BASE}/events`) return json({ items: [], nextCursor: null });
    if (path === `${BASE}/revisions`)
      return json({ items: [{ revision: 1, spec: qwen.spec, reason: 'created', actor: 'token:a', createdAt: qwen.createdAt }], nextCursor: null });
    if (path === '/graphql') return json({ data: { deployment: { objects: [{ kind: 'Deployment', namespace: 'team-a', name: 'qwen' }] } } });
    return extra(request);
  };
}

describe('DeploymentPage', () => {
  it('puts the cause first when it failed, and shows the owned objects', async () => {
    stubFetch(ADMIN, backend());
    renderAt(...PAGE, <DeploymentPage />);
    expect(await screen.findByText('image pull failed: vllm/vllm-openai:nope not found')).toBeInTheDocument();
    expect(screen.getByText(/Available: ImagePullFailed/)).toBeInTheDocument();
    expect(await screen.findByText('Deployment team-a/qwen')).toBeInTheDocument();
  });

  it('shows a viewer no control that would fail', async () => {
    stubFetch(viewerOf('team-a'), backend());
    renderAt(...PAGE, <DeploymentPage />);
    await screen.findByRole('heading', { name: 'qwen' });
    for (const name of ['Scale', 'Restart', 'Delete', 'Edit spec']) {
      expect(screen.queryByRole('button', { name })).toBeNull();
    }
    expect(screen.queryByRole('spinbutton', { name: 'Replicas' })).toBeNull();
    // Trying the model is reading, which a viewer may do.
    expect(screen.getByRole('button', { name: 'Send' })).toBeInTheDocument();
  });

  it('shows an autoscaled deployment’s range and the last decision in its words, with no Scale control', async () => {
    const auto = deployment(
      'qwen',
      { replicas: 1, autoscaling: { minReplicas: 1, maxReplicas: 6, target: { metric: 'waitingPerReplica', value: 4 } } },
      {
        replicas: { desired: 3, updated: 3, ready: 3, available: 3 },
        autoscaling: {
          replicas: 3,
          wanted: 6,
          limitedBy: 'quota',
          reason: 'holding 3: 9 waiting per replica, target 4; wants 6, quota allows 3',
          decidedAt: '2026-11-24T10:05:00Z',
          lastScaled: { at: '2026-11-24T10:01:00Z', from: 1, to: 3, reason: '1 → 3: 36 waiting per replica, target 4; wants 6, quota allows 3' },
        },
      },
    );
    stubFetch(ADMIN, (request) => {
      if (request.url.pathname === `${BASE}/watch`) return sse([{ event: 'state', data: auto }]);
      return backend()(request);
    });
    renderAt(...PAGE, <DeploymentPage />);
    const box = await screen.findByTestId('autoscaling');
    expect(box).toHaveTextContent('Autoscaled between 1 and 6 replicas, keeping queued requests per replica at 4');
    expect(within(box).getByText('Limited by').nextElementSibling).toHaveTextContent('the project’s quota');
    expect(within(box).getByText('The load asks for').nextElementSibling).toHaveTextContent('6');
    expect(box).toHaveTextContent('holding 3: 9 waiting per replica, target 4; wants 6, quota allows 3');
    expect(box).toHaveTextContent('1 → 3 at');
    expect(screen.queryByRole('button', { name: 'Scale' })).toBeNull();
    expect(screen.getByRole('button', { name: 'Restart' })).toBeInTheDocument();
  });

  it('says when a deployment at zero goes idle and how long its first request may wait', async () => {
    const idle = deployment(
      'qwen',
      {
        replicas: 0,
        autoscaling: {
          minReplicas: 0,
          maxReplicas: 2,
          target: { metric: 'waitingPerReplica', value: 4 },
          scaleToZeroAfterSeconds: 120,
        },
      },
      {
        phase: 'ScaledToZero',
        replicas: { desired: 0, updated: 0, ready: 0, available: 0 },
        autoscaling: {
          replicas: 0,
          wanted: 0,
          reason: '1 → 0: no request for 121 s (scaleToZeroAfterSeconds 120)',
          decidedAt: '2026-11-24T10:05:00Z',
        },
      },
    );
    stubFetch(ADMIN, (request) => {
      if (request.url.pathname === `${BASE}/watch`) return sse([{ event: 'state', data: idle }]);
      return backend()(request);
    });
    renderAt(...PAGE, <DeploymentPage />);
    const box = await screen.findByTestId('autoscaling');
    expect(box).toHaveTextContent(
      'After 120 s without a request it goes to zero replicas; the first request then waits up to 600 s while a replica starts.',
    );
    expect(box).toHaveTextContent('1 → 0: no request for 121 s');
  });

  it('explains a 412 on save: someone changed it since the editor opened', async () => {
    const calls = stubFetch(
      ADMIN,
      backend(({ method, url }) => {
        if (url.pathname !== BASE) return undefined;
        if (method === 'GET') return json(qwen, 200, { ETag: '"id-qwen.1"' });
        if (method === 'PATCH')
          return json({ type: 'urn:modelplane:problem:precondition-failed', title: 'Precondition failed', status: 412, detail: 'the spec changed' }, 412);
        return undefined;
      }),
    );
    renderAt(...PAGE, <DeploymentPage />);
    const user = userEvent.setup();
    await user.click(await screen.findByRole('button', { name: 'Edit spec' }));
    const editor = await screen.findByRole('textbox', { name: 'Spec (JSON)' });
    const spec = JSON.parse((editor as HTMLTextAreaElement).value);
    await user.clear(editor);
    await user.click(editor);
    await user.paste(JSON.stringify({ ...spec, replicas: 4 }));
    await user.click(screen.getByRole('button', { name: 'Save' }));
    expect(await screen.findByText(/Someone changed this deployment since you opened the editor/)).toBeInTheDocument();
    const patch = calls.find((c) => c.method === 'PATCH')!;
    expect(patch.headers.get('If-Match')).toBe('"id-qwen.1"');
    expect(patch.headers.get('Content-Type')).toBe('application/merge-patch+json');
    expect(patch.body).toEqual({ spec: { replicas: 4 } });
  });
});

const LOAD = {
  asOf: '2026-11-24T10:00:00Z',
  stale: false,
  dialect: 'vllm',
  pods: 1,
  podsRead: 1,
  requestsPerSecond: 2,
  promptTokensPerSecond: 100,
  generationTokensPerSecond: 50,
  ttftP50Seconds: 0.1,
  ttftP95Seconds: 0.3,
  waiting: 0,
  running: 1,
  kvCacheUsage: 0.1,
  errorRate: 0,
};

/** A Metrics answer with every series asked for, with a gap in the middle. */
function metricsFor(url: URL) {
  const names = (url.searchParams.get('series') ?? '').split(',');
  return json({
    windowSeconds: 3600,
    stepSeconds: 60,
    resolutionSeconds: 15,
    timestamps: ['2026-11-24T09:58:00Z', '2026-11-24T09:59:00Z', '2026-11-24T10:00:00Z'],
    series: names.map((name) => ({ name, unit: name === 'replicas' ? 'pods' : 'x', values: [1, null, 2] })),
  });
}

describe('DeploymentPage — serving', () => {
  const serving = (d: unknown, events: { event: string; data: unknown }[] = []) =>
    stubFetch(ADMIN, (request) => {
      const path = request.url.pathname;
      if (path === `${BASE}/watch`) return sse([{ event: 'state', data: d }, ...events]);
      if (path === `${BASE}/metrics`) return metricsFor(request.url);
      return backend()(request);
    });

  it('marks the autoscaler’s decisions on the replica chart, in words too', async () => {
    const auto = deployment(
      'qwen',
      { autoscaling: { minReplicas: 1, maxReplicas: 4, target: { metric: 'waitingPerReplica', value: 4 } } },
      { load: LOAD },
    );
    const event = (id: number, createdAt: string, kind: string, message: string) => ({
      id,
      deploymentId: 'id-qwen',
      kind,
      message,
      actor: 'autoscaler',
      createdAt,
    });
    stubFetch(ADMIN, (request) => {
      const path = request.url.pathname;
      if (path === `${BASE}/watch`) return sse([{ event: 'state', data: auto }]);
      if (path === `${BASE}/metrics`) return metricsFor(request.url);
      if (path === `${BASE}/events`)
        return json({
          items: [
            event(1, '2026-11-24T09:00:00Z', 'Autoscaled', '2 → 1: 0 waiting per replica, target 4'),
            event(2, '2026-11-24T09:59:30Z', 'Autoscaled', '1 → 4: 9 waiting per replica, target 4; wants 9, maxReplicas is 4'),
            event(3, '2026-11-24T09:59:40Z', 'PhaseChanged', 'Deploying'),
          ],
          nextCursor: null,
        });
      return backend()(request);
    });
    renderAt(...PAGE, <DeploymentPage />);
    const chart = await screen.findByRole('figure', { name: 'Replicas (pods)' });
    // Only the decision inside the charted hour, and no other timeline entry.
    const marks = await within(chart).findByRole('list', { name: 'Replicas: marked on the chart' });
    expect(within(marks).getAllByRole('listitem').map((li) => li.textContent)).toEqual([
      expect.stringMatching(/ 1 → 4: 9 waiting per replica, target 4; wants 9, maxReplicas is 4$/),
    ]);
    expect(within(screen.getByRole('figure', { name: 'Requests (req/s)' })).queryByRole('list', { name: /marked/ })).toBeNull();
    // The replica chart's plot draws them; no other chart has anything to draw.
    await waitFor(() => expect(FakePlot.live().filter((p) => (p.options.hooks?.draw ?? []).length > 0)).toHaveLength(1));
  });

  it('shows the current figures, follows the watch’s load events, and charts the chosen window', async () => {
    const ready = deployment('qwen', {}, { load: LOAD });
    const calls = serving(ready, [{ event: 'load', data: { id: 'id-qwen', name: 'qwen', load: { ...LOAD, requestsPerSecond: 7.5 }, canaryLoad: null } }]);
    renderAt(...PAGE, <DeploymentPage />);
    const section = await screen.findByRole('region', { name: 'Serving' });
    // The watch asked for load events, and the newer reading replaced the first.
    expect(calls.find((c) => c.url.pathname === `${BASE}/watch`)!.url.searchParams.get('load')).toBe('true');
    expect(await within(section).findByText('7.5 req/s')).toBeInTheDocument();
    // One call for every chart; the default window is the last hour.
    for (const name of ['Requests (req/s)', 'Tokens (tokens/s)', 'Time to first token (seconds)', 'Queue (requests)', 'Replicas (pods)']) {
      expect(await within(section).findByRole('figure', { name })).toBeInTheDocument();
    }
    const first = calls.filter((c) => c.url.pathname === `${BASE}/metrics`);
    expect(first).toHaveLength(1);
    expect(first[0]!.url.searchParams.get('window')).toBe('1h');
    expect(first[0]!.url.searchParams.get('step')).toBe('1m');
    expect(first[0]!.url.searchParams.get('track')).toBeNull();
    expect(first[0]!.url.searchParams.get('series')!.split(',')).toEqual([
      'requestsPerSecond',
      'promptTokensPerSecond',
      'generationTokensPerSecond',
      'ttftP95Seconds',
      'ttftP50Seconds',
      'waiting',
      'running',
      'replicas',
    ]);
    // Gaps stay gaps on the way to the chart.
    expect(FakePlot.live().map((p) => p.data[1])).toContainEqual([1, null, 2]);

    const user = userEvent.setup();
    const windows = within(section).getByRole('group', { name: 'Window' });
    expect(within(windows).getByRole('button', { name: '1h' })).toHaveAttribute('aria-pressed', 'true');
    await user.click(within(windows).getByRole('button', { name: '24h' }));
    await waitFor(() => expect(calls.some((c) => c.url.pathname === `${BASE}/metrics` && c.url.searchParams.get('window') === '24h')).toBe(true));
    const day = calls.find((c) => c.url.searchParams.get('window') === '24h')!;
    expect(day.url.searchParams.get('step')).toBe('15m');
    expect(within(windows).getByRole('button', { name: '24h' })).toHaveAttribute('aria-pressed', 'true');
  });

  it('shows the canary track’s figures beside all pods’, and charts a track on request', async () => {
    const canary = {
      phase: 'Ready',
      message: '',
      promoting: false,
      weight: 10,
      replicas: { desired: 1, updated: 1, ready: 1, available: 1 },
      endpoints: { external: [], cluster: 'http://qwen-canary.team-a:8000', openaiBase: null, reason: null },
      header: { name: 'x-modelplane-canary', value: 'true' },
      load: { ...LOAD, stale: true, reason: '1 of 1 ready pods could not be read: timed out', requestsPerSecond: 0.5 },
    };
    const calls = serving(deployment('qwen', {}, { load: LOAD, canary }));
    renderAt(...PAGE, <DeploymentPage />);
    const all = await screen.findByRole('region', { name: 'All pods' });
    const track = screen.getByRole('region', { name: 'Canary track' });
    expect(within(all).getByText('2 req/s')).toBeInTheDocument();
    expect(within(all).queryByText('Stale')).toBeNull();
    expect(within(track).getByText('0.5 req/s')).toBeInTheDocument();
    expect(within(track).getByText('Stale')).toBeInTheDocument();
    expect(within(track).getByText(/timed out/)).toBeInTheDocument();

    await userEvent.setup().selectOptions(await screen.findByLabelText('Pods'), 'canary');
    await waitFor(() => expect(calls.some((c) => c.url.searchParams.get('track') === 'canary')).toBe(true));
  });

  it('without a reading yet says so and asks for no chart', async () => {
    const calls = serving(deployment('qwen'));
    renderAt(...PAGE, <DeploymentPage />);
    const section = await screen.findByRole('region', { name: 'Serving' });
    expect(within(section).getByText('No readings yet')).toBeInTheDocument();
    expect(within(section).getByText('The charts start with the first reading.')).toBeInTheDocument();
    expect(calls.some((c) => c.url.pathname === `${BASE}/metrics`)).toBe(false);
  });
});

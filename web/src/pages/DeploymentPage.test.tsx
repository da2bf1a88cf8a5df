import { screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, deployment, json, renderAt, sse, stubFetch, viewerOf, type Handler } from '../test/render';
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

import { screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch, viewerOf } from '../test/render';
import { CreateDeployment } from './CreateDeployment';

afterEach(() => vi.unstubAllGlobals());

const PAGE = ['/projects/team-a/deployments/new', '/projects/:project/deployments/new'] as const;

describe('CreateDeployment', () => {
  it('puts each API field error next to its field and keeps what was typed', async () => {
    const calls = stubFetch(ADMIN, ({ method, url }) =>
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
    );
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

  it('the curl panel shows the body the form sends', async () => {
    stubFetch(ADMIN, () => undefined);
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
});

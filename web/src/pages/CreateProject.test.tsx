import { screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMIN, json, renderAt, stubFetch, viewerOf } from '../test/render';
import { CreateProject } from './CreateProject';

afterEach(() => vi.unstubAllGlobals());

describe('CreateProject', () => {
  it('creates the first project and shows a refused name next to the field', async () => {
    const calls = stubFetch(ADMIN, ({ method, url, body }) => {
      if (method !== 'POST' || url.pathname !== '/api/v1/projects') return undefined;
      if ((body as { name: string }).name === 'kube-system')
        return json({ type: 'x', title: 'Invalid input', status: 422, detail: 'name', errors: [{ field: 'name', message: 'is a system namespace' }] }, 422);
      return json({ id: 'p1', name: 'team-a', namespace: 'team-a', namespaceAdopted: false, createdAt: '2026-11-24T10:00:00Z' }, 201);
    });
    renderAt('/', '/', <CreateProject first />);
    const user = userEvent.setup();
    expect(await screen.findByRole('heading', { name: 'Create your first project' })).toBeInTheDocument();
    const name = screen.getByLabelText('Project name');
    await user.type(name, 'kube-system');
    await user.click(screen.getByRole('button', { name: 'Create project' }));
    expect(await screen.findByText('is a system namespace')).toBeInTheDocument();
    expect(name).toHaveAccessibleDescription(expect.stringContaining('is a system namespace'));
    await user.clear(name);
    await user.type(name, 'team-a');
    await user.click(screen.getByRole('button', { name: 'Create project' }));
    expect(await screen.findByText('elsewhere')).toBeInTheDocument(); // navigated to the new project
    expect(calls.filter((c) => c.method === 'POST').at(-1)!.body).toEqual({ name: 'team-a' });
  });

  it('tells anyone else who creates projects', async () => {
    stubFetch(viewerOf('team-a'), () => undefined);
    renderAt('/', '/', <CreateProject first />);
    expect(await screen.findByText('You have no projects yet')).toBeInTheDocument();
    expect(screen.queryByRole('button', { name: 'Create project' })).toBeNull();
  });
});

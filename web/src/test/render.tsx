// Renders a page as the app does (router, query client, auth) against a scripted fetch.
import { render } from '@testing-library/react';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { MemoryRouter, Route, Routes } from 'react-router';
import type { ReactNode } from 'react';
import { vi } from 'vitest';
import { AuthGate, AuthProvider } from '../auth/AuthProvider';
import { session } from '../auth/session';

export type Handler = (request: { method: string; url: URL; body: unknown; headers: Headers }) => Response | Promise<Response> | undefined;

export function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': status >= 400 ? 'application/problem+json' : 'application/json', ...headers },
  });
}

/** An SSE response that sends `events`, then `synced`, and stays open (as the real stream does). */
export function sse(events: { event: string; data: unknown; id?: number }[]): Response {
  const text = [...events, { event: 'synced', data: {} }].map((e, i) => `id: ${e.id ?? i + 1}\nevent: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`).join('');
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(text));
    },
  });
  return new Response(stream, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
}

export const ADMIN = { name: 'token:admin', kind: 'token', platformAdmin: true, groups: [], project: null, role: 'platform-admin' };
export const viewerOf = (project: string) => ({ name: 'token:v', kind: 'token', platformAdmin: false, groups: [], project, role: 'viewer' });

/** Stubs fetch: `whoami` answers `me`; the handler answers the rest (unknown calls fail the test). */
export function stubFetch(me: unknown, handler: Handler) {
  const calls: { method: string; url: URL; body: unknown; headers: Headers }[] = [];
  const fetchMock = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = input instanceof Request ? input : new Request(new URL(String(input), 'http://portal.test'), init);
    const url = new URL(request.url, 'http://portal.test');
    const text = request.method === 'GET' || request.method === 'HEAD' ? '' : await request.clone().text();
    const call = { method: request.method, url, body: text ? JSON.parse(text) : undefined, headers: request.headers };
    calls.push(call);
    if (url.pathname === '/api/v1/whoami') return json(me);
    if (url.pathname === '/api/v1/projects' && request.method === 'GET') return json({ items: [], nextCursor: null });
    const answer = await handler(call);
    if (!answer) throw new Error(`unexpected ${request.method} ${url.pathname}`);
    return answer;
  });
  vi.stubGlobal('fetch', fetchMock);
  return calls;
}

export function renderAt(path: string, pattern: string, page: ReactNode) {
  session.signIn('mpt_test_token');
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[path]}>
        <AuthProvider>
          <AuthGate>
            <Routes>
              <Route path={pattern} element={page} />
              <Route path="*" element={<p>elsewhere</p>} />
            </Routes>
          </AuthGate>
        </AuthProvider>
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

/** A deployment as the API returns it. */
export function deployment(name: string, overrides: Record<string, unknown> = {}, status: Record<string, unknown> = {}) {
  return {
    id: `id-${name}`,
    project: 'team-a',
    name,
    generation: 1,
    createdAt: '2026-11-24T10:00:00Z',
    updatedAt: '2026-11-24T10:00:00Z',
    spec: { model: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct', servedName: name }, engine: { kind: 'sim' }, replicas: 1, ...overrides },
    status: {
      phase: 'Ready',
      observedGeneration: 1,
      message: '',
      replicas: { desired: 1, updated: 1, ready: 1, available: 1 },
      conditions: [],
      endpoints: { external: [`http://gw/team-a/${name}`], cluster: null, openaiBase: `http://gw/team-a/${name}/v1`, reason: null },
      ...status,
    },
  };
}

// A minimal GraphQL-over-HTTP call, for what REST does not show (the Kubernetes objects a
// deployment owns). The schema is openapi/schema.graphql.
import { ApiError } from './client';
import { session } from '../auth/session';

export async function graphql<T>(query: string, variables: Record<string, unknown>): Promise<T> {
  const token = session.token();
  const response = await fetch('/graphql', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  if (response.status === 401) session.expire();
  const body = (await response.json().catch(() => null)) as { data?: T; errors?: { message: string }[] } | null;
  if (!response.ok || !body || body.errors?.length) {
    throw new ApiError({
      type: 'urn:modelplane:problem:graphql',
      title: 'GraphQL error',
      status: response.status,
      detail: body?.errors?.map((e) => e.message).join('; ') || `HTTP ${response.status}`,
    });
  }
  return body.data as T;
}

import type { ReactNode } from 'react';
import { ApiError } from '../api/client';

export function Loading({ what }: { what: string }) {
  return (
    <p className="state" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

/** An error with the API's words, its request id, and what to do next. */
export function ErrorState({ error, action }: { error: unknown; action?: ReactNode }) {
  const problem = error instanceof ApiError ? error.problem : undefined;
  return (
    <div className="state state-error" role="alert">
      <p>
        <strong>{problem?.title ?? 'Something went wrong'}</strong>: {problem?.detail ?? String(error)}
      </p>
      {problem?.requestId && <p className="muted">Request id {problem.requestId} (quote it when reporting this).</p>}
      {action}
    </div>
  );
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="state state-empty">
      <p>
        <strong>{title}</strong>
      </p>
      {children}
    </div>
  );
}

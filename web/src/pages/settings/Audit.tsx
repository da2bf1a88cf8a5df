// The project's audit log, newest first.
import { useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, call, type Schemas } from '../../api/client';
import { ErrorState, Loading } from '../../components/States';
import { when } from '../deployment/Status';

type AuditEvent = Schemas['AuditEvent'];

const PAGE = 200;
const MAX_PAGES = 50;
const SHOWN = 50;

/**
 * The API pages the audit log oldest first and has no newest-first order, so the newest event
 * is on its last page: read every page (the log only grows with token, binding and project
 * changes, so it stays small), then reverse.
 */
async function loadAudit(project: string): Promise<{ events: AuditEvent[]; complete: boolean }> {
  const events: AuditEvent[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < MAX_PAGES; i++) {
    const page = await call(
      api.GET('/api/v1/projects/{project}/audit', { params: { path: { project }, query: { limit: PAGE, cursor } } }),
    );
    events.push(...page.items);
    cursor = page.nextCursor ?? undefined;
    if (!cursor) return { events: events.reverse(), complete: true };
  }
  return { events: events.reverse(), complete: false };
}

export function Audit({ project }: { project: string }) {
  // Same key as the token and binding sections invalidate after a change.
  const audit = useQuery({ queryKey: ['audit', project], queryFn: () => loadAudit(project) });
  const [shown, setShown] = useState(SHOWN);
  const events = audit.data?.events ?? [];
  return (
    <section className="card" aria-labelledby="audit-title">
      <h2 id="audit-title">Audit log</h2>
      <p className="hint">Who changed this project, its tokens and its role bindings, newest first.</p>
      {audit.isPending ? (
        <Loading what="the audit log" />
      ) : audit.error ? (
        <ErrorState error={audit.error} />
      ) : events.length === 0 ? (
        <p className="muted">Nothing recorded yet.</p>
      ) : (
        <>
          {!audit.data.complete && (
            <p className="notice notice-warn">
              This log is longer than {PAGE * MAX_PAGES} events; only its oldest {PAGE * MAX_PAGES} are shown here.
            </p>
          )}
          <div className="table-wrap">
            <table>
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Who</th>
                  <th scope="col">What</th>
                  <th scope="col">Target</th>
                  <th scope="col" className="hide-narrow">
                    Details
                  </th>
                </tr>
              </thead>
              <tbody>
                {events.slice(0, shown).map((e) => (
                  <tr key={e.id}>
                    <td>
                      <time dateTime={e.createdAt}>{when(e.createdAt)}</time>
                    </td>
                    <td>{e.actor}</td>
                    <td>{e.kind}</td>
                    <td>{e.target}</td>
                    <td className="hide-narrow">{e.message}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {events.length > shown && (
            <button type="button" className="btn" onClick={() => setShown((n) => n + SHOWN)}>
              Show older events
            </button>
          )}
        </>
      )}
    </section>
  );
}

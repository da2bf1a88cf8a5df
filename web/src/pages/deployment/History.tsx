// The deployment's history: its timeline (stored pages plus live entries) and its revisions,
// with a diff between any two and a rollback.
import { useMemo, useState } from 'react';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api, call, type Deployment, type Revision, type TimelineEvent } from '../../api/client';
import { ErrorState } from '../../components/States';
import { Confirm } from './Confirm';
import { canonical, diffLines } from './diff';
import { when } from './Status';

/** Every page of a cursor-paged list (timelines and revision lists are short). */
async function allPages<T>(load: (cursor?: string) => Promise<{ items: T[]; nextCursor?: string | null }>): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 20; i++) {
    const page = await load(cursor);
    out.push(...page.items);
    if (!page.nextCursor) break;
    cursor = page.nextCursor;
  }
  return out;
}

/** The stored timeline (every page) merged with the entries the watch brought since, newest first. */
export function useTimeline(deployment: Deployment, live: TimelineEvent[]) {
  const { project, name } = deployment;
  const stored = useQuery({
    queryKey: ['events', project, name],
    queryFn: () =>
      allPages((cursor) =>
        call(
          api.GET('/api/v1/projects/{project}/deployments/{name}/events', {
            params: { path: { project, name }, query: { limit: 200, cursor } },
          }),
        ),
      ),
  });
  const events = useMemo(() => {
    const byId = new Map<number, TimelineEvent>();
    for (const e of stored.data ?? []) byId.set(e.id, e);
    for (const e of live) byId.set(e.id, e);
    return [...byId.values()].sort((a, b) => b.id - a.id);
  }, [stored.data, live]);
  return { stored, events };
}

export function Timeline({ deployment, live }: { deployment: Deployment; live: TimelineEvent[] }) {
  const { stored, events } = useTimeline(deployment, live);
  return (
    <section className="card" aria-labelledby="timeline-title">
      <h2 id="timeline-title">Timeline</h2>
      {stored.error && <ErrorState error={stored.error} />}
      {stored.isPending && <p className="muted">Loading…</p>}
      <ol className="timeline" aria-live="polite">
        {events.map((e) => (
          <li key={e.id}>
            <span className={`event-kind event-${e.kind}`}>{e.kind}</span> {e.message}
            <div className="muted">
              <time dateTime={e.createdAt}>{when(e.createdAt)}</time> · {e.actor}
            </div>
          </li>
        ))}
      </ol>
    </section>
  );
}

function RevisionSelect(props: {
  id: string;
  label: string;
  list: Revision[];
  value: number | undefined;
  onChange: (revision: number) => void;
}) {
  return (
    <div className="field">
      <label htmlFor={props.id}>{props.label}</label>
      <select id={props.id} value={props.value ?? ''} onChange={(e) => props.onChange(Number(e.target.value))}>
        {props.list.map((r) => (
          <option key={r.revision} value={r.revision}>
            {r.revision} ({r.reason})
          </option>
        ))}
      </select>
    </div>
  );
}

export function Revisions({ deployment, editable }: { deployment: Deployment; editable: boolean }) {
  const { project, name } = deployment;
  const client = useQueryClient();
  const revisions = useQuery({
    queryKey: ['revisions', project, name],
    queryFn: () =>
      allPages((cursor) =>
        call(
          api.GET('/api/v1/projects/{project}/deployments/{name}/revisions', {
            params: { path: { project, name }, query: { limit: 200, cursor } },
          }),
        ),
      ),
  });
  const list: Revision[] = useMemo(() => [...(revisions.data ?? [])].sort((a, b) => a.revision - b.revision), [revisions.data]);
  const latest = list[list.length - 1]?.revision;
  const [from, setFrom] = useState<number | null>(null);
  const [to, setTo] = useState<number | null>(null);
  const [rollbackTo, setRollbackTo] = useState<number | null>(null);
  const rollback = useMutation({
    mutationFn: (revision: number) =>
      call(
        api.POST('/api/v1/projects/{project}/deployments/{name}/rollback', {
          params: { path: { project, name } },
          body: { revision },
        }),
      ),
    onSuccess: () => client.invalidateQueries({ queryKey: ['revisions', project, name] }),
  });

  const toRev = to ?? latest;
  const fromRev = from ?? (toRev !== undefined ? list.filter((r) => r.revision < toRev).pop()?.revision : undefined);
  const a = list.find((r) => r.revision === fromRev);
  const b = list.find((r) => r.revision === toRev);
  const diff = a && b ? diffLines(canonical(a.spec), canonical(b.spec)) : [];
  const changed = diff.filter((l) => l.kind !== 'same').length;

  return (
    <section className="card" aria-labelledby="revisions-title">
      <h2 id="revisions-title">Revisions</h2>
      {revisions.error && <ErrorState error={revisions.error} />}
      <div className="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Revision</th>
              <th scope="col">Why</th>
              <th scope="col" className="hide-narrow">
                By
              </th>
              <th scope="col" className="hide-narrow">
                When
              </th>
              {editable && <th scope="col">Action</th>}
            </tr>
          </thead>
          <tbody>
            {[...list].reverse().map((r) => (
              <tr key={r.revision}>
                <td>
                  {r.revision}
                  {r.revision === deployment.generation && <span className="badge badge-info">current</span>}
                </td>
                <td>{r.reason}</td>
                <td className="hide-narrow">{r.actor}</td>
                <td className="hide-narrow">
                  <time dateTime={r.createdAt}>{when(r.createdAt)}</time>
                </td>
                {editable && (
                  <td>
                    {r.revision !== deployment.generation && (
                      <button type="button" className="btn btn-small" onClick={() => setRollbackTo(r.revision)}>
                        Roll back to revision {r.revision}
                      </button>
                    )}
                  </td>
                )}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {rollback.error && <ErrorState error={rollback.error} />}
      {rollback.isSuccess && <p role="status">Rolled back: a new revision with the old spec is rolling out.</p>}

      {list.length > 1 && (
        <>
          <h3>Compare</h3>
          <div className="filters">
            <RevisionSelect id="diff-from" label="From revision" list={list} value={fromRev} onChange={setFrom} />
            <RevisionSelect id="diff-to" label="To revision" list={list} value={toRev} onChange={setTo} />
          </div>
          <p className="hint">{changed === 0 ? 'The two specs are the same.' : `${changed} changed line(s); + added, − removed.`}</p>
          <div className="diff" role="group" aria-label={`Differences from revision ${fromRev} to revision ${toRev}`}>
            {diff.map((l, i) => (
              <div key={i} className={l.kind === 'same' ? '' : l.kind}>
                {l.kind === 'add' ? '+ ' : l.kind === 'del' ? '- ' : '  '}
                {l.text}
              </div>
            ))}
          </div>
        </>
      )}
      {rollbackTo !== null && (
        <Confirm
          title={`Roll back ${name} to revision ${rollbackTo}?`}
          confirm={`Roll back to revision ${rollbackTo}`}
          onCancel={() => setRollbackTo(null)}
          onConfirm={() => {
            rollback.mutate(rollbackTo);
            setFrom(deployment.generation);
            setTo(rollbackTo);
            setRollbackTo(null);
          }}
        >
          <p>
            The spec of revision {rollbackTo} becomes current again as a new revision; the replica count stays as it is now.
          </p>
        </Confirm>
      )}
    </section>
  );
}

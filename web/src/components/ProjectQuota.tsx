// The project's quota as bars (used / limit), or what it asks for when it has no quota.
import { useEffect, useRef } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { getQuota, gpuLabel, keys, type ProjectQuota as Quota } from '../api/capacity';

/** `used` of `limit` as a bar with the numbers beside it; over the limit shows full and says so. */
export function UsageBar({ label, used, limit }: { label: string; used: number; limit: number }) {
  const pct = limit > 0 ? Math.min(100, Math.round((used / limit) * 100)) : used > 0 ? 100 : 0;
  const tone = used > limit ? 'bad' : pct >= 80 ? 'warn' : 'ok';
  return (
    <div className="quota-row" data-testid="quota-row">
      <span className="quota-label mono">{label}</span>
      <span
        className="quota-bar"
        role="progressbar"
        aria-label={label}
        aria-valuemin={0}
        aria-valuemax={limit}
        aria-valuenow={Math.min(used, limit)}
        aria-valuetext={`${used} of ${limit} used${used > limit ? ' (over the limit)' : ''}`}
      >
        <span className={`quota-fill quota-${tone}`} style={{ width: `${pct}%` }} />
      </span>
      <span className="quota-text" data-testid="quota-numbers">
        {used} / {limit}
        {used > limit && <span className="cause"> over the limit</span>}
      </span>
    </div>
  );
}

function Requested({ quota }: { quota: Quota }) {
  const asked = quota.requested.filter((r) => r.gpus > 0);
  return (
    <p className="quota-none" data-testid="quota-none">
      {asked.length === 0
        ? 'No GPUs requested'
        : asked.map((r) => `${gpuLabel(r)}: ${r.gpus} GPU${r.gpus === 1 ? '' : 's'} requested`).join(' · ')}
      <span className="muted"> · no quota</span>
    </p>
  );
}

/**
 * The project's quota. `changes` is anything that differs whenever the project's specs change
 * (the deployment list passes its deployments' generations), so the numbers follow the list.
 */
export function ProjectQuota({ project, changes }: { project: string; changes?: string }) {
  const client = useQueryClient();
  const quota = useQuery({ queryKey: keys.quota(project), queryFn: () => getQuota(project) });
  // The first value arrives with the fetch at mount; every later one means a spec changed.
  const seen = useRef(changes);
  useEffect(() => {
    if (changes === undefined || seen.current === changes) return;
    const first = seen.current === undefined;
    seen.current = changes;
    if (!first) void client.invalidateQueries({ queryKey: keys.quota(project) });
  }, [changes, project, client]);

  if (quota.isPending) return null;
  if (quota.error) {
    return (
      <p className="muted quota" data-testid="quota">
        The project’s quota could not be read ({quota.error.message}).
      </p>
    );
  }
  const q = quota.data;
  return (
    <section className="quota" aria-label="Quota" data-testid="quota">
      <h2 className="quota-title">Quota</h2>
      <div className="quota-rows">
        {q.replicas.limit != null && <UsageBar label="Replicas" used={q.replicas.used} limit={q.replicas.limit} />}
        {q.gpus.map((g) => (
          <UsageBar key={`${g.resourceName}/${g.product ?? ''}`} label={`GPUs ${gpuLabel(g)}`} used={g.used} limit={g.limit} />
        ))}
        {q.gpus.length === 0 && <Requested quota={q} />}
      </div>
    </section>
  );
}

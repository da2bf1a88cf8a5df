import { useEffect, useRef, useState, type RefObject } from 'react';
import { Link, useParams, useSearchParams } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import type { Deployment, Phase } from '../api/client';
import { useProjectDeployments } from '../api/live';
import { getDeploymentMetrics, keys, num, seriesValues } from '../api/metrics';
import { useRole } from '../auth/AuthProvider';
import { can } from '../auth/roles';
import { CopyButton } from '../components/CopyButton';
import { PhaseBadge } from '../components/PhaseBadge';
import { ProjectQuota } from '../components/ProjectQuota';
import { ReplicaBar } from '../components/ReplicaBar';
import { Sparkline } from '../components/Sparkline';
import { Empty, ErrorState, Loading } from '../components/States';
import { useTitle } from '../components/Title';

const PHASES: Phase[] = ['Pending', 'Deploying', 'Ready', 'Degraded', 'Failed', 'ScaledToZero', 'Deleting'];

/** GPUs a deployment asks for in all: per pod (count, else tensor-parallel size, else 1) × replicas. */
export function gpusRequested(d: Deployment): number {
  const gpu = d.spec.resources?.gpu;
  if (!gpu) return 0;
  const perPod = gpu.count ?? d.spec.engine?.tensorParallelSize ?? 1;
  return perPod * (d.spec.replicas ?? 1);
}

/** `key=value` (or just `key`) against the spec's labels. */
export function matchesLabel(d: Deployment, selector: string): boolean {
  const wanted = selector.trim();
  if (!wanted) return true;
  const [key, ...rest] = wanted.split('=');
  const labels = d.spec.labels ?? {};
  if (!key || !(key.trim() in labels)) return false;
  return rest.length === 0 || labels[key.trim()] === rest.join('=').trim();
}

export function filterDeployments(
  items: Iterable<Deployment>,
  filters: { phase: string; label: string; name: string },
): Deployment[] {
  const name = filters.name.trim().toLowerCase();
  return [...items]
    .filter((d) => !filters.phase || d.status.phase === filters.phase)
    .filter((d) => !name || d.name.toLowerCase().includes(name))
    .filter((d) => matchesLabel(d, filters.label))
    .sort((a, b) => a.name.localeCompare(b.name));
}

function ago(iso: string, now: number): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

/** The time now, again every `every` ms, so "2m ago" keeps telling the truth. */
export function useNow(every: number): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), every);
    return () => clearInterval(timer);
  }, [every]);
  return now;
}

/** True once `ref`'s element has come into view (at once where IntersectionObserver is missing). */
function useSeen(ref: RefObject<Element | null>): boolean {
  const [seen, setSeen] = useState(typeof IntersectionObserver === 'undefined');
  useEffect(() => {
    const el = ref.current;
    if (seen || !el) return;
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) setSeen(true);
    });
    observer.observe(el);
    return () => observer.disconnect();
  }, [ref, seen]);
  return seen;
}

/**
 * Requests/s now (from `status.load`, live) and over the last hour as a sparkline: one small
 * metrics call per row once the row is in view, only for deployments that have been read.
 */
function Requests({ deployment }: { deployment: Deployment }) {
  const { project, name } = deployment;
  const load = deployment.status.load;
  const ref = useRef<HTMLSpanElement>(null);
  const seen = useSeen(ref);
  const hour = useQuery({
    queryKey: keys.metrics(project, name, 'sparkline'),
    queryFn: () => getDeploymentMetrics(project, name, { window: '1h', step: '1m', series: ['requestsPerSecond'] }),
    enabled: seen && !!load,
    refetchInterval: 60_000,
  });
  const now = load?.requestsPerSecond;
  const trend = hour.data ? seriesValues(hour.data, 'requestsPerSecond') : [];
  return (
    <span className="requests" ref={ref}>
      {!load ? (
        <span className="muted" title="No readings yet" data-testid="requests-none">
          —<span className="visually-hidden"> no readings yet</span>
        </span>
      ) : (
        <>
          {/* Without a measured step the trend says nothing the figure beside it does not. */}
          {trend.some((v) => v !== null) && <Sparkline values={trend} label="Requests/s over the last hour" format={num} />}
          <span className="num" data-testid="requests-now" title={load.stale ? `Not current: ${load.reason ?? 'the last reading failed'}` : undefined}>
            {now === null || now === undefined ? (
              <>
                —<span className="visually-hidden"> not measured</span>
              </>
            ) : (
              `${num(now)} req/s`
            )}
            {load.stale && <span className="muted"> (stale)</span>}
          </span>
        </>
      )}
    </span>
  );
}

/** Every deployment of a project, live from the project's watch stream. */
export function DeploymentList() {
  const { project = '' } = useParams();
  useTitle(`Deployments · ${project}`);
  const editor = can.edit(useRole(project));
  const now = useNow(15_000);
  const { items, status } = useProjectDeployments(project);
  const [params, setParams] = useSearchParams();
  const filters = { phase: params.get('phase') ?? '', label: params.get('label') ?? '', name: params.get('name') ?? '' };
  const setFilter = (key: keyof typeof filters, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    setParams(next, { replace: true });
  };
  const rows = filterDeployments(items.values(), filters);
  const filtered = filters.phase || filters.label || filters.name;
  const base = `/projects/${encodeURIComponent(project)}/deployments`;
  // Changes whenever a spec does (created, changed, scaled, deleted): the quota's numbers follow.
  const specs = status.loaded
    ? [...items.values()]
        .map((d) => `${d.id}:${d.generation}`)
        .sort()
        .join(',')
    : undefined;

  return (
    <>
      <div className="page-head">
        <h1>Deployments</h1>
        <span className={`live${status.connected ? ' live-on' : ''}`} role="status">
          {status.connected ? 'Live' : status.loaded ? 'Reconnecting…' : 'Connecting…'}
        </span>
        {editor && (
          <div className="actions">
            <Link className="btn btn-primary" to={`${base}/new`}>
              Create deployment
            </Link>
          </div>
        )}
      </div>

      <ProjectQuota project={project} changes={specs} />

      <div className="filters" role="search" aria-label="Filter deployments">
        <div className="field">
          <label htmlFor="filter-phase">Phase</label>
          <select id="filter-phase" value={filters.phase} onChange={(e) => setFilter('phase', e.target.value)}>
            <option value="">Any phase</option>
            {PHASES.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="filter-label">Label</label>
          <input
            id="filter-label"
            placeholder="team=nlp"
            value={filters.label}
            onChange={(e) => setFilter('label', e.target.value)}
          />
        </div>
        <div className="field">
          <label htmlFor="filter-name">Name</label>
          <input id="filter-name" placeholder="qwen" value={filters.name} onChange={(e) => setFilter('name', e.target.value)} />
        </div>
      </div>

      {status.error && !status.connected && status.loaded && (
        <p className="notice notice-warn" role="alert">
          The live stream broke ({status.error}); reconnecting. What you see may be out of date.
        </p>
      )}
      {!status.loaded ? (
        status.error ? (
          <ErrorState
            error={new Error(status.error)}
            action={<p>Check the project name, or pick another project above.</p>}
          />
        ) : (
          <Loading what="deployments" />
        )
      ) : items.size === 0 ? (
        <Empty title="No deployments in this project yet">
          {editor ? (
            <p>
              <Link to={`${base}/new`}>Create deployment</Link> — the simulator preset runs without a GPU.
            </p>
          ) : (
            <p>An editor of {project} can create one.</p>
          )}
        </Empty>
      ) : rows.length === 0 && filtered ? (
        <Empty title="No deployment matches these filters">
          <button type="button" className="btn" onClick={() => setParams(new URLSearchParams(), { replace: true })}>
            Clear filters
          </button>
        </Empty>
      ) : (
        <div className="table-wrap">
          <table>
            <caption className="visually-hidden">Deployments of {project}</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Phase</th>
                <th scope="col">Replicas</th>
                <th scope="col">GPUs</th>
                <th scope="col">Requests/s</th>
                <th scope="col">Endpoint</th>
                <th scope="col" className="hide-narrow">
                  Updated
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((d) => {
                const url = d.status.endpoints.external[0];
                const gpus = gpusRequested(d);
                return (
                  <tr key={d.id}>
                    <td>
                      <Link to={`${base}/${encodeURIComponent(d.name)}`}>{d.name}</Link>
                      <div className="muted mono">{d.spec.model.source}</div>
                    </td>
                    <td>
                      <PhaseBadge phase={d.status.phase} />
                      {d.status.phase !== 'Ready' && d.status.message && <div className="cause">{d.status.message}</div>}
                    </td>
                    <td>
                      <ReplicaBar replicas={d.status.replicas} />
                    </td>
                    <td>{gpus > 0 ? gpus : '—'}</td>
                    <td>
                      <Requests deployment={d} />
                    </td>
                    <td>
                      {url ? (
                        <span className="endpoint">
                          <code>{url}</code> <CopyButton text={url} label="Copy URL" />
                        </span>
                      ) : (
                        <span className="muted">{d.status.endpoints.reason ?? '—'}</span>
                      )}
                    </td>
                    <td className="hide-narrow">
                      <time dateTime={d.updatedAt} title={d.updatedAt}>
                        {ago(d.updatedAt, now)}
                      </time>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

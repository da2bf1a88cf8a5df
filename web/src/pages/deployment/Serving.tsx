// What the deployment serves: the current figures from `status.load` (live through the
// watch's `load` events) for the whole deployment and, beside them, its canary track; and
// charts over a chosen window from `…/metrics`, refetched every 15 s.
import { lazy, Suspense, useMemo, useState, type ReactNode } from 'react';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import type { Deployment, TimelineEvent } from '../../api/client';
import {
  getDeploymentMetrics,
  keys,
  num,
  percent,
  seconds,
  WINDOWS,
  type Load,
  type MetricsWindow,
  type SeriesName,
  type Track,
} from '../../api/metrics';
import { Empty, ErrorState } from '../../components/States';
import type { ChartLine } from '../../components/TimeChart';
import { useTimeline } from './History';
import { when } from './Status';

// uPlot and the chart are a chunk of their own, fetched when a deployment page first shows
// charts: the other screens do not carry them. A page left open across an upgrade may ask
// for a chunk that is gone: it says so instead of failing the whole page.
const TimeChart = lazy(() =>
  import('../../components/TimeChart').then(
    (m) => ({ default: m.TimeChart }),
    () => ({
      default: ({ title }: { title: string }) => (
        <p className="muted">
          {title}: the chart could not be loaded (modelplane may have been upgraded); reload the page.
        </p>
      ),
    }),
  ),
);

/** A figure, or a dash that says it was not measured (null is never zero). */
function Value({ value, format }: { value: number | null | undefined; format: (v: number) => string }) {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return (
      <span className="muted">
        —<span className="visually-hidden"> not measured</span>
      </span>
    );
  }
  return <>{format(value)}</>;
}

const rate = (unit: string) => (v: number) => `${num(v)} ${unit}`;
const requests = (v: number) => `${num(v)} ${v === 1 ? 'request' : 'requests'}`;

function Figure({ term, children }: { term: string; children: ReactNode }) {
  return (
    <div className="figure">
      <dt>{term}</dt>
      <dd className="num">{children}</dd>
    </div>
  );
}

/** One track's current figures, or why there are none. */
export function LoadFigures({ load }: { load: Load | null | undefined }) {
  if (!load) {
    return (
      <Empty title="No readings yet">
        <p className="muted">modelplane reads the model servers' metrics every collection interval; the figures appear after the first reading.</p>
      </Empty>
    );
  }
  if (!load.stale && load.pods === 0) {
    return (
      <Empty title="No ready pods">
        <p className="muted">Nothing is serving, so there is nothing to measure; figures appear once a pod is ready.</p>
      </Empty>
    );
  }
  if (!load.stale && load.dialect === 'unknown') {
    return (
      <Empty title="No metrics from this engine">
        <p className="muted">{load.reason ?? 'modelplane does not know the metrics this engine publishes.'}</p>
      </Empty>
    );
  }
  return (
    <>
      <p className="load-head">
        {load.stale && <span className="badge badge-warn">Stale</span>}
        <span className="muted">
          as of <time dateTime={load.asOf}>{when(load.asOf)}</time> · {load.podsRead} of {load.pods} ready{' '}
          {load.pods === 1 ? 'pod' : 'pods'} read · {load.dialect} metrics
        </span>
      </p>
      {load.reason && (
        <p className={load.stale ? 'notice notice-warn' : 'hint'} role={load.stale ? 'status' : undefined}>
          {load.stale && <strong>Not current: </strong>}
          {load.reason}
          {load.stale && `${/[.!?]$/.test(load.reason) ? '' : '.'} The figures below are the last ones read.`}
        </p>
      )}
      <dl className="figures">
        <Figure term="Requests">
          <Value value={load.requestsPerSecond} format={rate('req/s')} />
        </Figure>
        <Figure term="Tokens in (prompt)">
          <Value value={load.promptTokensPerSecond} format={rate('tokens/s')} />
        </Figure>
        <Figure term="Tokens out (generated)">
          <Value value={load.generationTokensPerSecond} format={rate('tokens/s')} />
        </Figure>
        <Figure term="Time to first token p50">
          <Value value={load.ttftP50Seconds} format={seconds} />
        </Figure>
        <Figure term="Time to first token p95">
          <Value value={load.ttftP95Seconds} format={seconds} />
        </Figure>
        <Figure term="Inter-token latency p50">
          <Value value={load.interTokenLatencyP50Seconds} format={seconds} />
        </Figure>
        <Figure term="Request latency p95">
          <Value value={load.e2eLatencyP95Seconds} format={seconds} />
        </Figure>
        <Figure term="Queued (waiting)">
          <Value value={load.waiting} format={requests} />
        </Figure>
        <Figure term="Running">
          <Value value={load.running} format={requests} />
        </Figure>
        <Figure term="KV cache in use">
          <Value value={load.kvCacheUsage} format={percent} />
        </Figure>
        <Figure term="Errors">
          <Value value={load.errorRate} format={(v) => `${percent(v)} of requests`} />
        </Figure>
      </dl>
    </>
  );
}

const CHARTS: { title: string; unit: string; format: (v: number) => string; lines: ChartLine[] }[] = [
  { title: 'Requests', unit: 'req/s', format: num, lines: [{ series: 'requestsPerSecond', label: 'requests/s' }] },
  {
    title: 'Tokens',
    unit: 'tokens/s',
    format: num,
    lines: [
      { series: 'promptTokensPerSecond', label: 'in (prompt)' },
      { series: 'generationTokensPerSecond', label: 'out (generated)' },
    ],
  },
  {
    title: 'Time to first token',
    unit: 'seconds',
    format: seconds,
    lines: [
      { series: 'ttftP95Seconds', label: 'p95' },
      { series: 'ttftP50Seconds', label: 'p50' },
    ],
  },
  {
    title: 'Queue',
    unit: 'requests',
    format: num,
    lines: [
      { series: 'waiting', label: 'waiting' },
      { series: 'running', label: 'running' },
    ],
  },
  { title: 'Replicas', unit: 'pods', format: num, lines: [{ series: 'replicas', label: 'ready pods' }] },
];
const SERIES: SeriesName[] = CHARTS.flatMap((c) => c.lines.map((l) => l.series));

/** The charts over a window the reader picks, for the whole deployment or one track. */
function Charts({ deployment, live }: { deployment: Deployment; live: TimelineEvent[] }) {
  const { project, name } = deployment;
  const [span, setSpan] = useState<MetricsWindow>('1h');
  const [track, setTrack] = useState<Track>('all');
  const hasCanary = !!deployment.status.canary;
  const shownTrack = hasCanary ? track : 'all';
  const choice = WINDOWS.find((w) => w.window === span) ?? WINDOWS[1];
  const metrics = useQuery({
    queryKey: keys.metrics(project, name, span, shownTrack),
    queryFn: () =>
      getDeploymentMetrics(project, name, {
        window: span,
        step: choice.step,
        series: SERIES,
        track: shownTrack === 'all' ? undefined : shownTrack,
      }),
    refetchInterval: 15_000,
    placeholderData: keepPreviousData,
  });
  const over = `the last ${choice.label}`;
  // The autoscaler's decisions, marked on the replica chart (oldest first).
  const { events } = useTimeline(deployment, live);
  const decisions = useMemo(
    () =>
      deployment.spec.autoscaling
        ? events
            .filter((e) => e.kind === 'Autoscaled')
            .map((e) => ({ at: e.createdAt, label: e.message }))
            .reverse()
        : [],
    [events, deployment.spec.autoscaling],
  );
  return (
    <>
      <div className="chart-controls">
        <div className="segmented" role="group" aria-label="Window">
          {WINDOWS.map((w) => (
            <button
              key={w.window}
              type="button"
              className="btn btn-small"
              aria-pressed={w.window === span}
              title={`The last ${w.label}`}
              onClick={() => setSpan(w.window)}
            >
              {w.window}
            </button>
          ))}
        </div>
        {hasCanary && (
          <div className="field field-inline">
            <label htmlFor="chart-track">Pods</label>
            <select id="chart-track" value={track} onChange={(e) => setTrack(e.target.value as Track)}>
              <option value="all">All</option>
              <option value="stable">Stable track</option>
              <option value="canary">Canary track</option>
            </select>
          </div>
        )}
        {metrics.isPlaceholderData && <span className="muted">Loading {choice.label}…</span>}
      </div>
      {metrics.error ? (
        <ErrorState error={metrics.error} />
      ) : !metrics.data ? (
        <p className="muted">Loading the charts…</p>
      ) : (
        <Suspense fallback={<p className="muted">Loading the charts…</p>}>
          <div className="charts">
            {CHARTS.map((c) => (
              <TimeChart
                key={c.title}
                title={c.title}
                unit={c.unit}
                format={c.format}
                lines={c.lines}
                metrics={metrics.data}
                window={over}
                marks={c.title === 'Replicas' ? decisions : undefined}
              />
            ))}
          </div>
        </Suspense>
      )}
    </>
  );
}

export function Serving({ deployment, live = [] }: { deployment: Deployment; live?: TimelineEvent[] }) {
  const { load, canary } = deployment.status;
  return (
    <section className="card" aria-labelledby="serving-title">
      <h2 id="serving-title">Serving</h2>
      {canary ? (
        <div className="grid-2">
          <section aria-labelledby="serving-all">
            <h3 id="serving-all">All pods</h3>
            <LoadFigures load={load} />
          </section>
          <section aria-labelledby="serving-canary">
            <h3 id="serving-canary">Canary track</h3>
            <LoadFigures load={canary.load} />
          </section>
        </div>
      ) : (
        <LoadFigures load={load} />
      )}
      {load ? (
        <Charts deployment={deployment} live={live} />
      ) : (
        <p className="hint">The charts start with the first reading.</p>
      )}
    </section>
  );
}

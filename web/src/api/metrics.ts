// Serving metrics (#38): a deployment's current load (`status.load`, live through the watch's
// `load` events) and its series over a window (`GET …/metrics`), typed from the OpenAPI
// document like every other call.
import { api, call, type Deployment, type Schemas } from './client';

export type Load = Schemas['Load'];
export type Metrics = Schemas['Metrics'];
export type SeriesName = Schemas['SeriesName'];

/** The data of a watch's `load` event (`?load=true`): a deployment's new reading. */
export interface LoadUpdate {
  id: string;
  name: string;
  load?: Load | null;
  canaryLoad?: Load | null;
}

/** The deployment with the reading of a `load` event in its status (and its canary's). */
export function withLoad(d: Deployment, update: LoadUpdate): Deployment {
  const canary = d.status.canary ? { ...d.status.canary, load: update.canaryLoad ?? null } : d.status.canary;
  return { ...d, status: { ...d.status, load: update.load ?? null, canary } };
}

/** The windows the deployment page offers, with the step asked for (about 60–170 points each). */
export const WINDOWS = [
  // No step: the server's default (the window / 60, at least the collection interval).
  { window: '15m', label: '15 minutes', step: undefined },
  { window: '1h', label: '1 hour', step: '1m' },
  { window: '6h', label: '6 hours', step: '5m' },
  { window: '24h', label: '24 hours', step: '15m' },
  { window: '7d', label: '7 days', step: '1h' },
] as const;
export type MetricsWindow = (typeof WINDOWS)[number]['window'];

export type Track = 'all' | 'stable' | 'canary';

export const keys = {
  metrics: (project: string, name: string, ...rest: unknown[]) => ['metrics', project, name, ...rest] as const,
};

export function getDeploymentMetrics(
  project: string,
  name: string,
  query: { window: string; step?: string; series: SeriesName[]; track?: Track },
): Promise<Metrics> {
  return call(
    api.GET('/api/v1/projects/{project}/deployments/{name}/metrics', {
      params: {
        path: { project, name },
        query: { window: query.window, step: query.step, series: query.series.join(','), track: query.track },
      },
    }),
  );
}

/** One series' values, or none when the answer does not have it. */
export function seriesValues(metrics: Metrics | undefined, name: SeriesName): (number | null)[] {
  return metrics?.series.find((s) => s.name === name)?.values ?? [];
}

// Formatting. A missing figure is "not measured", never zero: callers show a dash for null.

/** A number with as many decimals as its size deserves: 1,234 · 12.3 · 1.23 · <0.01. */
export function num(v: number): string {
  const abs = Math.abs(v);
  if (abs > 0 && abs < 0.01) return '<0.01';
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2;
  return v.toLocaleString('en-US', { maximumFractionDigits: digits });
}

/** Seconds as milliseconds below one second: 230 ms · 1.45 s. */
export function seconds(v: number): string {
  if (Math.abs(v) < 1) return `${Math.round(v * 1000).toLocaleString('en-US')} ms`;
  return `${num(v)} s`;
}

/** A fraction (0..1) as a percentage: 42% · 0.5%. */
export function percent(v: number): string {
  const p = v * 100;
  if (p > 0 && p < 0.1) return '<0.1%';
  return `${p.toLocaleString('en-US', { maximumFractionDigits: p >= 10 ? 0 : 1 })}%`;
}

/** The latest measured value, and the smallest and largest, of a series (undefined: none measured). */
export function summary(values: (number | null)[]): { latest: number; min: number; max: number } | undefined {
  let latest: number | undefined;
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v === null || !Number.isFinite(v)) continue;
    latest = v;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return latest === undefined ? undefined : { latest, min, max };
}

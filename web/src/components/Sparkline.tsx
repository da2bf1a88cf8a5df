// A tiny inline SVG trend line (no library, no canvas): the deployment list's requests/s
// over the last hour. Gaps (null: nothing measured) stay gaps; no measured value at all
// shows a dash.
import { summary } from '../api/metrics';

/** The SVG path through `values` scaled into `width` × `height`, broken at every null. */
export function sparkPath(values: (number | null)[], width: number, height: number): string {
  const s = summary(values);
  if (!s) return '';
  const max = s.max > 0 ? s.max : 1;
  const dx = values.length > 1 ? width / (values.length - 1) : 0;
  const pad = 1;
  let d = '';
  let pen = false;
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      pen = false;
      return;
    }
    const x = (i * dx).toFixed(1);
    const y = (height - pad - (Math.max(0, v) / max) * (height - 2 * pad)).toFixed(1);
    d += `${pen ? 'L' : 'M'}${x} ${y}`;
    // A lone point between gaps still shows: a short tick.
    if (!pen && (i + 1 >= values.length || values[i + 1] === null)) d += `h1`;
    pen = true;
  });
  return d;
}

/** `values` as a trend line, labelled in words (`label` says what, `format` writes a value). */
export function Sparkline({
  values,
  label,
  format,
  width = 80,
  height = 20,
}: {
  values: (number | null)[];
  label: string;
  format: (v: number) => string;
  width?: number;
  height?: number;
}) {
  const s = summary(values);
  if (!s) {
    return (
      <span className="muted" title={`${label}: nothing measured`} data-testid="sparkline-none">
        —<span className="visually-hidden">{` ${label}: nothing measured`}</span>
      </span>
    );
  }
  return (
    <svg
      className="sparkline"
      role="img"
      aria-label={`${label}: latest ${format(s.latest)}, lowest ${format(s.min)}, highest ${format(s.max)}`}
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
    >
      <line x1="0" y1={height - 0.5} x2={width} y2={height - 0.5} className="sparkline-base" />
      <path d={sparkPath(values, width, height)} className="sparkline-line" />
    </svg>
  );
}

// A time-series chart drawn by uPlot (canvas), readable without colour: every line has its
// own dash pattern and a text legend, the y axis names its unit, and the numbers are there
// as text too (a summary for screen readers and an on-demand table for everyone).
import { useEffect, useId, useMemo, useRef, useState } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { summary, type Metrics, type SeriesName } from '../api/metrics';

export interface ChartLine {
  series: SeriesName;
  label: string;
}

/** A moment marked on the chart (an autoscaler decision): a vertical line, and its words below. */
export interface ChartMark {
  at: string;
  label: string;
}

// At least 3:1 against white (WCAG 1.4.11), and told apart by dash pattern and order anyway.
const COLORS = ['#1f4fd1', '#b35900', '#116329', '#8250df'];
const DASHES: number[][] = [[], [8, 4], [2, 3], [10, 3, 2, 3]];
const color = (i: number) => COLORS[i % COLORS.length]!;
const dash = (i: number) => DASHES[i % DASHES.length]!;

const tick = (v: number) => v.toLocaleString('en-US', { maximumSignificantDigits: 3 });
const clock = (seconds: number) =>
  new Date(seconds * 1000).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });

/** A sample of a line's stroke, for the legend. */
function Swatch({ index }: { index: number }) {
  return (
    <svg className="swatch" width="28" height="10" viewBox="0 0 28 10" aria-hidden="true">
      <line x1="1" y1="5" x2="27" y2="5" stroke={color(index)} strokeWidth="2.5" strokeDasharray={dash(index).join(' ') || undefined} />
    </svg>
  );
}

/**
 * `lines` of `metrics` over its window, with `unit` on the y axis and values written by
 * `format`. `title` names the chart; `window` says over what ("the last 1 hour").
 */
export function TimeChart({
  title,
  window,
  metrics,
  lines,
  unit,
  format,
  marks,
  height = 170,
}: {
  title: string;
  window: string;
  metrics: Metrics;
  lines: ChartLine[];
  unit: string;
  format: (v: number) => string;
  /** Moments to mark; a chart given none (undefined) never draws marks. */
  marks?: ChartMark[];
  height?: number;
}) {
  const id = useId();
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const [hover, setHover] = useState<number | null>(null);
  const [table, setTable] = useState(false);
  // What decides the chart's shape (recreate) and what only its data (setData).
  const shape = `${unit}|${lines.map((l) => `${l.series}:${l.label}`).join('|')}|${marks !== undefined}`;
  const data = useMemo(() => {
    const xs = metrics.timestamps.map((t) => Date.parse(t) / 1000);
    const ys = lines.map((l) => metrics.series.find((s) => s.name === l.series)?.values ?? xs.map(() => null));
    return [xs, ...ys] as uPlot.AlignedData;
    // `shape` stands for `lines`, which callers write inline (a new array every render).
  }, [metrics, shape]);
  const latest = useRef(data);
  latest.current = data;
  const stats = data.slice(1).map((values) => summary(values as (number | null)[]));
  const measured = stats.some((s) => s !== undefined);
  // The marks inside the window (from its first step to one step past its last).
  const xs0 = data[0] as number[];
  const step = metrics.stepSeconds;
  const markable = marks !== undefined;
  const shown = (marks ?? []).filter((m) => {
    const t = Date.parse(m.at) / 1000;
    return xs0.length > 0 && t >= xs0[0]! && t <= xs0[xs0.length - 1]! + step;
  });
  const markTimes = useRef<number[]>([]);
  markTimes.current = shown.map((m) => Date.parse(m.at) / 1000);
  const drawMarks = (u: uPlot) => {
    const { ctx, bbox } = u;
    ctx.save();
    ctx.strokeStyle = '#57606a';
    ctx.lineWidth = 1;
    ctx.setLineDash([2, 3]);
    for (const t of markTimes.current) {
      const x = Math.round(u.valToPos(t, 'x', true));
      ctx.beginPath();
      ctx.moveTo(x, bbox.top);
      ctx.lineTo(x, bbox.top + bbox.height);
      ctx.stroke();
    }
    ctx.restore();
  };

  useEffect(() => {
    const el = box.current;
    if (!el || !measured) return;
    const options: uPlot.Options = {
      width: el.clientWidth || 480,
      height,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true },
        // From zero: a rate or a queue that looks big must be big.
        y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        { stroke: '#57606a', grid: { stroke: '#eaeef2' }, ticks: { stroke: '#d0d7de' } },
        {
          label: unit,
          stroke: '#57606a',
          size: 64,
          grid: { stroke: '#eaeef2' },
          ticks: { stroke: '#d0d7de' },
          // Plain numbers: the axis label carries the unit (`format` may change it, as ms ↔ s).
          values: (_u, splits) => splits.map(tick),
        },
      ],
      series: [
        {},
        ...lines.map((l, i) => ({
          label: l.label,
          stroke: color(i),
          dash: dash(i),
          width: 2,
          // A gap (null: nothing measured) stays a gap.
          spanGaps: false,
          // Where points show (sparse data), the first line's are filled, the others hollow.
          points: { fill: i === 0 ? color(i) : '#ffffff', stroke: color(i) },
        })),
      ],
      hooks: {
        setCursor: [(u) => setHover(u.cursor.idx ?? null)],
        // Marks as dotted vertical lines across the plot (their words are listed below it).
        draw: markable ? [drawMarks] : [],
      },
    };
    const u = new uPlot(options, latest.current, el);
    plot.current = u;
    const resize = typeof ResizeObserver === 'undefined' ? undefined : new ResizeObserver(() => u.setSize({ width: el.clientWidth, height }));
    resize?.observe(el);
    return () => {
      resize?.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Recreated only when its shape changes; new data goes through setData below.
  }, [shape, height, measured]);

  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  const markKey = markTimes.current.join(',');
  useEffect(() => {
    plot.current?.redraw();
  }, [markKey]);

  const xs = data[0] as number[];
  const at = hover !== null && hover < xs.length ? hover : null;
  const valueAt = (i: number) => {
    if (at !== null) {
      const v = (data[i + 1] as (number | null)[])[at];
      return v === null || v === undefined ? '—' : format(v);
    }
    const s = stats[i];
    return s ? format(s.latest) : '—';
  };
  const described = lines
    .map((l, i) => {
      const s = stats[i];
      return s
        ? `${l.label}: latest ${format(s.latest)}, lowest ${format(s.min)}, highest ${format(s.max)}`
        : `${l.label}: nothing measured`;
    })
    .join('; ');

  return (
    <figure className="chart" aria-labelledby={`${id}-title`} aria-describedby={`${id}-summary`}>
      <figcaption id={`${id}-title`} className="chart-title">
        {title} <span className="muted">({unit})</span>
      </figcaption>
      <p id={`${id}-summary`} className="visually-hidden">
        Over {window}: {described}.
      </p>
      <ul className="chart-legend">
        {lines.map((l, i) => (
          <li key={l.series}>
            <Swatch index={i} /> {l.label} <span className="num">{valueAt(i)}</span>
          </li>
        ))}
        <li className="muted">{at !== null ? `at ${clock(xs[at]!)}` : measured ? 'latest' : ''}</li>
      </ul>
      {measured ? (
        <div ref={box} className="chart-canvas" aria-hidden="true" data-testid="chart-canvas" />
      ) : (
        <p className="muted chart-empty">Nothing measured over {window}.</p>
      )}
      {shown.length > 0 && (
        <ol className="chart-marks" aria-label={`${title}: marked on the chart`}>
          {shown.map((m) => (
            <li key={`${m.at}|${m.label}`}>
              <time dateTime={m.at}>{clock(Date.parse(m.at) / 1000)}</time> {m.label}
            </li>
          ))}
        </ol>
      )}
      {measured && (
        <details className="chart-table" onToggle={(e) => setTable((e.target as HTMLDetailsElement).open)}>
          <summary>Table of the numbers</summary>
          {table && (
            <div className="table-wrap">
              <table>
                <caption className="visually-hidden">
                  {title} ({unit}) over {window}
                </caption>
                <thead>
                  <tr>
                    <th scope="col">Time</th>
                    {lines.map((l) => (
                      <th key={l.series} scope="col">
                        {l.label}
                      </th>
                    ))}
                  </tr>
                </thead>
                <tbody>
                  {xs.map((x, row) => (
                    <tr key={x}>
                      <th scope="row">
                        <time dateTime={metrics.timestamps[row]}>{clock(x)}</time>
                      </th>
                      {lines.map((l, i) => {
                        const v = (data[i + 1] as (number | null)[])[row];
                        return (
                          <td key={l.series} className="num">
                            {v === null || v === undefined ? '—' : format(v)}
                          </td>
                        );
                      })}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </details>
      )}
    </figure>
  );
}

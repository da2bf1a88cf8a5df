import { act, render, screen, within } from '@testing-library/react';
import type uPlot from 'uplot';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';
import type { Metrics } from '../api/metrics';
import { FakePlot } from '../test/uplot';
import { TimeChart } from './TimeChart';

const metrics: Metrics = {
  windowSeconds: 240,
  stepSeconds: 60,
  resolutionSeconds: 15,
  timestamps: ['2026-11-24T10:00:00Z', '2026-11-24T10:01:00Z', '2026-11-24T10:02:00Z', '2026-11-24T10:03:00Z'],
  series: [
    { name: 'ttftP95Seconds', unit: 'seconds', values: [0.2, null, 0.45, 0.3] },
    { name: 'ttftP50Seconds', unit: 'seconds', values: [0.1, null, null, 0.12] },
  ],
};
const seconds = (v: number) => `${Math.round(v * 1000)} ms`;
const lines = [
  { series: 'ttftP95Seconds', label: 'p95' },
  { series: 'ttftP50Seconds', label: 'p50' },
] as const;

describe('TimeChart', () => {
  it('draws a Metrics answer with gaps: nulls stay nulls, each line its own dash, the unit on the axis', () => {
    render(<TimeChart title="Time to first token" window="the last 1 hour" metrics={metrics} lines={[...lines]} unit="seconds" format={seconds} />);
    const [plot] = FakePlot.live();
    expect(plot).toBeDefined();
    expect(plot!.data).toEqual([
      [Date.parse('2026-11-24T10:00:00Z') / 1000, Date.parse('2026-11-24T10:01:00Z') / 1000, Date.parse('2026-11-24T10:02:00Z') / 1000, Date.parse('2026-11-24T10:03:00Z') / 1000],
      [0.2, null, 0.45, 0.3],
      [0.1, null, null, 0.12],
    ]);
    const series = plot!.options.series.slice(1);
    expect(series.map((s) => s.label)).toEqual(['p95', 'p50']);
    expect(series.every((s) => s.spanGaps === false)).toBe(true);
    expect(new Set(series.map((s) => JSON.stringify(s.dash))).size).toBe(2);
    expect(plot!.options.axes?.[1]?.label).toBe('seconds');
    // Readable without colour: a text legend (with the latest values), and the numbers in words.
    const figure = screen.getByRole('figure', { name: 'Time to first token (seconds)' });
    const legend = within(figure).getAllByRole('listitem').map((li) => li.textContent?.trim());
    expect(legend).toEqual(['p95 300 ms', 'p50 120 ms', 'latest']);
    // The axis ticks are plain numbers under the unit's label.
    const ticks = plot!.options.axes![1]!.values as (u: uPlot, splits: number[]) => string[];
    expect(ticks(plot as unknown as uPlot, [0, 0.25, 1000])).toEqual(['0', '0.25', '1,000']);
    // Hovering a point shows the values there (a gap as a dash).
    act(() => plot!.options.hooks!.setCursor![0]!({ cursor: { idx: 2 } } as uPlot));
    expect(within(figure).getAllByRole('listitem').map((li) => li.textContent?.trim())).toEqual(['p95 450 ms', 'p50 —', expect.stringMatching(/^at /)]);
    act(() => plot!.options.hooks!.setCursor![0]!({ cursor: { idx: null } } as unknown as uPlot));
    expect(figure).toHaveAccessibleDescription(
      'Over the last 1 hour: p95: latest 300 ms, lowest 200 ms, highest 450 ms; p50: latest 120 ms, lowest 100 ms, highest 120 ms.',
    );
  });

  it('follows new data without a new chart, and shows the numbers as a table on demand', async () => {
    const { rerender } = render(
      <TimeChart title="Time to first token" window="the last 1 hour" metrics={metrics} lines={[...lines]} unit="seconds" format={seconds} />,
    );
    const next = { ...metrics, series: [{ name: 'ttftP95Seconds' as const, unit: 'seconds', values: [null, null, null, 1.5] }] };
    rerender(<TimeChart title="Time to first token" window="the last 1 hour" metrics={next} lines={[...lines]} unit="seconds" format={seconds} />);
    expect(FakePlot.live()).toHaveLength(1);
    // A series the answer lacks is all gaps, not zeros.
    expect(FakePlot.live()[0]!.data.slice(1)).toEqual([
      [null, null, null, 1.5],
      [null, null, null, null],
    ]);
    await userEvent.setup().click(screen.getByText('Table of the numbers'));
    const table = screen.getByRole('table', { name: 'Time to first token (seconds) over the last 1 hour' });
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(4);
    expect(within(rows[3]!).getAllByRole('cell').map((c) => c.textContent)).toEqual(['1500 ms', '—']);
    expect(within(rows[0]!).getAllByRole('cell').map((c) => c.textContent)).toEqual(['—', '—']);
  });

  it('says nothing was measured instead of drawing an empty chart', () => {
    const empty = { ...metrics, series: [{ name: 'requestsPerSecond' as const, unit: 'req/s', values: [null, null, null, null] }] };
    render(<TimeChart title="Requests" window="the last 15 minutes" metrics={empty} lines={[{ series: 'requestsPerSecond', label: 'requests/s' }]} unit="req/s" format={String} />);
    expect(screen.getByText('Nothing measured over the last 15 minutes.')).toBeInTheDocument();
    expect(FakePlot.live()).toHaveLength(0);
    expect(screen.getByRole('figure', { name: 'Requests (req/s)' })).toHaveAccessibleDescription('Over the last 15 minutes: requests/s: nothing measured.');
  });
});

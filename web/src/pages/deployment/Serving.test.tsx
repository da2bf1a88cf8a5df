import { render, screen, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import type { Load } from '../../api/metrics';
import { LoadFigures } from './Serving';

const reading: Load = {
  asOf: '2026-11-24T10:00:00Z',
  stale: false,
  dialect: 'vllm',
  pods: 2,
  podsRead: 2,
  requestsPerSecond: 3.25,
  promptTokensPerSecond: 1234.5,
  generationTokensPerSecond: 456.7,
  ttftP50Seconds: 0.0812,
  ttftP95Seconds: 1.5,
  interTokenLatencyP50Seconds: 0.021,
  e2eLatencyP95Seconds: 12.3,
  waiting: 4,
  running: 1,
  kvCacheUsage: 0.42,
  errorRate: 0.005,
};

/** The figures as `term: value` lines. */
function figures() {
  return screen.getAllByRole('term').map((dt) => `${dt.textContent}: ${dt.nextElementSibling?.textContent}`);
}

describe('LoadFigures', () => {
  it('shows every figure with its unit, and when and from how many pods it was read', () => {
    render(<LoadFigures load={reading} />);
    expect(figures()).toEqual([
      'Requests: 3.25 req/s',
      'Tokens in (prompt): 1,235 tokens/s',
      'Tokens out (generated): 457 tokens/s',
      'Time to first token p50: 81 ms',
      'Time to first token p95: 1.5 s',
      'Inter-token latency p50: 21 ms',
      'Request latency p95: 12.3 s',
      'Queued (waiting): 4 requests',
      'Running: 1 request',
      'KV cache in use: 42%',
      'Errors: 0.5% of requests',
    ]);
    expect(screen.getByText(/2 of 2 ready pods read · vllm metrics/)).toBeInTheDocument();
    expect(screen.getByText(/as of/).querySelector('time')).toHaveAttribute('dateTime', '2026-11-24T10:00:00Z');
    expect(screen.queryByText('Stale')).toBeNull();
  });

  it('shows a figure that was not measured as a dash, never as zero', () => {
    render(<LoadFigures load={{ ...reading, ttftP95Seconds: null, errorRate: undefined, waiting: 0 }} />);
    expect(figures()).toContain('Time to first token p95: — not measured');
    expect(figures()).toContain('Errors: — not measured');
    expect(figures()).toContain('Queued (waiting): 0 requests');
  });

  it('marks stale figures with a badge and the reason, and still shows the last ones', () => {
    render(
      <LoadFigures
        load={{ ...reading, stale: true, podsRead: 0, reason: '2 of 2 ready pods could not be read: pods/proxy: 403 Forbidden' }}
      />,
    );
    expect(screen.getByText('Stale')).toHaveClass('badge', 'badge-warn');
    const notice = screen.getByRole('status');
    expect(notice).toHaveTextContent('Not current: 2 of 2 ready pods could not be read: pods/proxy: 403 Forbidden');
    expect(notice).toHaveTextContent('The figures below are the last ones read.');
    expect(figures()[0]).toBe('Requests: 3.25 req/s');
    expect(screen.getByText(/0 of 2 ready pods read/)).toBeInTheDocument();
  });

  it('says when there are no readings yet', () => {
    render(<LoadFigures load={undefined} />);
    expect(screen.getByText('No readings yet')).toBeInTheDocument();
    expect(screen.queryAllByRole('term')).toHaveLength(0);
  });

  it('says when no pod is ready', () => {
    render(<LoadFigures load={{ asOf: reading.asOf, stale: false, dialect: 'vllm', pods: 0, podsRead: 0, reason: 'no ready pods' }} />);
    expect(screen.getByText('No ready pods')).toBeInTheDocument();
    expect(screen.queryAllByRole('term')).toHaveLength(0);
  });

  it('says when modelplane does not know the engine’s metrics', () => {
    const reason = 'modelplane does not know the metrics of the `custom` engine';
    render(<LoadFigures load={{ asOf: reading.asOf, stale: false, dialect: 'unknown', pods: 1, podsRead: 0, reason }} />);
    const empty = screen.getByText('No metrics from this engine').closest('.state')!;
    expect(within(empty as HTMLElement).getByText(reason)).toBeInTheDocument();
    expect(screen.queryAllByRole('term')).toHaveLength(0);
  });
});

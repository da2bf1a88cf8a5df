import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { Sparkline, sparkPath } from './Sparkline';

const fmt = (v: number) => `${v} req/s`;

describe('Sparkline', () => {
  it('draws the values as a line, broken where nothing was measured', () => {
    render(<Sparkline values={[0, 2, null, 4, 1]} label="Requests/s over the last hour" format={fmt} />);
    const svg = screen.getByRole('img', { name: 'Requests/s over the last hour: latest 1 req/s, lowest 0 req/s, highest 4 req/s' });
    const d = svg.querySelector('path.sparkline-line')!.getAttribute('d')!;
    // Two pieces: a new `M` after the gap.
    expect(d.match(/M/g)).toHaveLength(2);
    expect(d).toBe(sparkPath([0, 2, null, 4, 1], 80, 20));
    expect(d.startsWith('M0.0 19.0L20.0 ')).toBe(true);
  });

  it('keeps a lone point between gaps visible', () => {
    expect(sparkPath([null, 3, null], 80, 20)).toBe('M40.0 1.0h1');
  });

  it('shows a dash when nothing was measured', () => {
    const { rerender } = render(<Sparkline values={[]} label="Requests/s" format={fmt} />);
    expect(screen.getByTestId('sparkline-none')).toHaveTextContent(/^— Requests\/s: nothing measured$/);
    expect(screen.queryByRole('img')).toBeNull();
    rerender(<Sparkline values={[null, null]} label="Requests/s" format={fmt} />);
    expect(screen.getByTestId('sparkline-none')).toBeInTheDocument();
  });
});

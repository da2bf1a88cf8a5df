import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { deployment } from '../../test/render';
import { Endpoints } from './Status';

describe('Endpoints', () => {
  it('with keys, says a model key is needed and puts one in the curl', () => {
    render(<Endpoints deployment={deployment('qwen', { access: 'keys' }) as never} />);
    expect(screen.getByTestId('access')).toHaveTextContent(/need a model key of team-a/);
    expect(screen.getByText(/Authorization: Bearer \$MODEL_KEY/)).toBeInTheDocument();
  });

  it('public, says anyone may call it and sends no key', () => {
    render(<Endpoints deployment={deployment('qwen', { access: 'public' }) as never} />);
    expect(screen.getByTestId('access')).toHaveTextContent(/Anyone who reaches the Gateway/);
    expect(screen.queryByText(/MODEL_KEY/)).toBeNull();
  });
});

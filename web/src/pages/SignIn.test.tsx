import { render, screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { describe, expect, it, vi } from 'vitest';
import { SignIn } from './SignIn';

const signInWithProvider = vi.fn(async (_returnTo: string) => {});
vi.mock('../auth/oidc', () => ({
  signInFailure: () => null,
  signInWithProvider: (returnTo: string) => signInWithProvider(returnTo),
}));

const OIDC = {
  issuer: 'https://login.example.com/realms/acme',
  clientId: 'modelplane-portal',
  audience: 'modelplane-portal',
  scopes: ['openid', 'profile'],
  usernameClaim: 'sub',
  groupsClaim: 'groups',
};

function renderSignIn(props: Parameters<typeof SignIn>[0]) {
  return render(
    <QueryClientProvider client={new QueryClient()}>
      <SignIn {...props} />
    </QueryClientProvider>,
  );
}

describe('SignIn', () => {
  it('with single sign-on configured, offers it first and keeps token sign-in for automation users', async () => {
    window.history.replaceState(null, '', '/projects/team-a/deployments?phase=Failed');
    renderSignIn({ config: { oidc: OIDC } });
    const sso = screen.getByRole('button', { name: 'Sign in with single sign-on' });
    expect(document.activeElement).toBe(sso);
    expect(screen.getByText(/You sign in at login\.example\.com/)).toBeTruthy();
    expect(screen.getByLabelText('API token')).toBeTruthy();
    await userEvent.click(sso);
    expect(signInWithProvider).toHaveBeenCalledWith('/projects/team-a/deployments?phase=Failed');
  });

  it('without it, is the token form alone, and says when a session ended', () => {
    renderSignIn({ expired: true });
    expect(screen.queryByRole('button', { name: 'Sign in with single sign-on' })).toBeNull();
    expect(document.activeElement).toBe(screen.getByLabelText('API token'));
    expect(screen.getByRole('alert').textContent).toMatch(/Your session ended: the token expired or was revoked/);
  });
});

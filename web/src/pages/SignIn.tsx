import { useState, type FormEvent } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { ApiError } from '../api/client';
import { session } from '../auth/session';
import { signInFailure, signInWithProvider, type SignInConfig } from '../auth/oidc';
import { useTitle } from '../components/Title';

/**
 * Sign-in with the company's identity provider (when configured) or an API token; also
 * the screen for a session that ended (a token expired or revoked, a provider session over).
 */
export function SignIn({ expired, config = { oidc: null } }: { expired?: boolean; config?: SignInConfig }) {
  useTitle('Sign in');
  const [redirecting, setRedirecting] = useState(false);
  const [ssoError, setSsoError] = useState<string | null>(signInFailure());
  const sso = async () => {
    setSsoError(null);
    setRedirecting(true);
    try {
      const here = window.location.pathname + window.location.search;
      await signInWithProvider(here === '/' || here.startsWith('/auth/') ? '/' : here);
    } catch (e) {
      setSsoError(e instanceof Error ? e.message : String(e));
      setRedirecting(false);
    }
  };
  const provider = config.oidc ? hostOf(config.oidc.issuer) : null;
  const client = useQueryClient();
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    const value = token.trim();
    if (!value) {
      setError('Paste an API token (it starts with mpt_).');
      return;
    }
    setBusy(true);
    try {
      // Check the token before keeping it.
      const response = await fetch('/api/v1/whoami', { headers: { Authorization: `Bearer ${value}` } });
      if (response.status === 401) {
        setError('modelplane does not know this token, or it has expired or been revoked.');
        return;
      }
      if (!response.ok) {
        const problem = await response.json().catch(() => null);
        throw new ApiError(problem ?? { type: 'about:blank', title: 'Error', status: response.status, detail: `HTTP ${response.status}` });
      }
      client.clear();
      session.signIn(value);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin" id="main">
      <div className="card signin-card">
        <h1 id="signin-title">
          <img src="/favicon.svg" alt="" width="28" height="28" /> Sign in to modelplane
        </h1>
        {expired && (
          <p className="state state-error" role="alert">
            Your session ended: {provider ? 'your sign-in at the identity provider ended, or ' : ''}the token expired or
            was revoked. Sign in again.
          </p>
        )}
        {provider && (
          <section aria-labelledby="sso-title" className="signin-sso">
            <h2 id="sso-title">With your company account</h2>
            <button type="button" className="btn btn-primary" onClick={() => void sso()} disabled={redirecting} autoFocus>
              {redirecting ? 'Going to your identity provider…' : 'Sign in with single sign-on'}
            </button>
            <p className="hint">You sign in at {provider}, then come back here.</p>
            {ssoError && (
              <p className="field-error" role="alert">
                Single sign-on did not complete: {ssoError}
              </p>
            )}
          </section>
        )}
        <form onSubmit={submit} aria-labelledby={provider ? 'token-title' : 'signin-title'}>
          {provider && <h2 id="token-title">With an API token</h2>}
          <div className={`field${error ? ' field-invalid' : ''}`}>
            <label htmlFor="token">API token</label>
            <input
              id="token"
              name="token"
              type="password"
              autoComplete="off"
              spellCheck={false}
              value={token}
              onChange={(e) => setToken(e.target.value)}
              aria-describedby={error ? 'token-error token-hint' : 'token-hint'}
              aria-invalid={error ? true : undefined}
              autoFocus={!provider}
            />
            <p className="hint" id="token-hint">
              A token starting with <code>mpt_</code>. <code>./scripts/run.sh</code> prints where the first one is; an
              admin can create more under “Tokens &amp; access”. It is kept in this tab only.
            </p>
            {error && (
              <p className="field-error" id="token-error" role="alert">
                {error}
              </p>
            )}
          </div>
          <button type="submit" className={provider ? 'btn' : 'btn btn-primary'} disabled={busy}>
            {busy ? 'Checking…' : 'Sign in'}
          </button>
        </form>
      </div>
    </main>
  );
}

/** The provider's host, to say where the person signs in. */
function hostOf(issuer: string): string {
  try {
    return new URL(issuer).host;
  } catch {
    return issuer;
  }
}

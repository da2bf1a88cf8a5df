import { useState, type FormEvent } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { ApiError } from '../api/client';
import { session } from '../auth/session';
import { useTitle } from '../components/Title';

/** Sign-in with an API token; also the screen for a token that expired or was revoked. */
export function SignIn({ expired }: { expired?: boolean }) {
  useTitle('Sign in');
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
      <form onSubmit={submit} className="card signin-card" aria-labelledby="signin-title">
        <h1 id="signin-title">
          <img src="/favicon.svg" alt="" width="28" height="28" /> Sign in to modelplane
        </h1>
        {expired && (
          <p className="state state-error" role="alert">
            Your session ended: the token expired or was revoked. Sign in again with a valid token.
          </p>
        )}
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
            autoFocus
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
        <button type="submit" className="btn btn-primary" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}

// The signed-in credential. An API token lives in sessionStorage (gone when the tab
// closes); the identity provider's token lives in memory, set again on every refresh (the
// provider's session itself is in sessionStorage, see `oidc.ts`). Never in a URL, a cookie
// or a log.
const KEY = 'modelplane.token';

export type SessionState = 'signed-out' | 'signed-in' | 'expired';

type Listener = () => void;
const listeners = new Set<Listener>();
let expired = false;
/** The identity provider's current token, when signed in with it. */
let providerToken: string | null = null;

function notify() {
  for (const l of listeners) l();
}

export const session = {
  token(): string | null {
    return providerToken ?? sessionStorage.getItem(KEY);
  },
  state(): SessionState {
    if (expired) return 'expired';
    return session.token() ? 'signed-in' : 'signed-out';
  },
  /** Whether the session is the identity provider's (single sign-on). */
  isProvider(): boolean {
    return providerToken !== null;
  },
  signIn(token: string) {
    sessionStorage.setItem(KEY, token.trim());
    providerToken = null;
    expired = false;
    notify();
  },
  /** Signed in (or refreshed) with the identity provider: `token` is sent from now on. */
  useProviderToken(token: string) {
    const first = providerToken === null || expired;
    providerToken = token;
    expired = false;
    // A refresh changes nothing on screen; the next request simply carries the new token.
    if (first) notify();
  },
  signOut() {
    sessionStorage.removeItem(KEY);
    providerToken = null;
    expired = false;
    notify();
  },
  /** The API said 401 to a signed-in credential, or the provider ended the session. */
  expire() {
    sessionStorage.removeItem(KEY);
    providerToken = null;
    if (!expired) {
      expired = true;
      notify();
    }
  },
  subscribe(listener: Listener): () => void {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },
};

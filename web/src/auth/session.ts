// The signed-in token. It lives in sessionStorage (gone when the tab closes), never in a
// URL, a cookie or a log.
const KEY = 'modelplane.token';

export type SessionState = 'signed-out' | 'signed-in' | 'expired';

type Listener = () => void;
const listeners = new Set<Listener>();
let expired = false;

function notify() {
  for (const l of listeners) l();
}

export const session = {
  token(): string | null {
    return sessionStorage.getItem(KEY);
  },
  state(): SessionState {
    if (expired) return 'expired';
    return sessionStorage.getItem(KEY) ? 'signed-in' : 'signed-out';
  },
  signIn(token: string) {
    sessionStorage.setItem(KEY, token.trim());
    expired = false;
    notify();
  },
  signOut() {
    sessionStorage.removeItem(KEY);
    expired = false;
    notify();
  },
  /** The API said 401 to a signed-in token: it expired or was revoked. */
  expire() {
    sessionStorage.removeItem(KEY);
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

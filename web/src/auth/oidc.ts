// Single sign-on with the company's identity provider: the Authorization Code flow with
// PKCE as a public client (oidc-client-ts), configured by `GET /api/v1/auth/config`.
//
// - Everything the flow keeps (the PKCE verifier while away at the provider, then the
//   tokens) is in sessionStorage: gone with the tab, never in localStorage.
// - The code and state leave the URL as soon as they are exchanged.
// - The portal sends the ID token when the API's audience is the portal's client id (as
//   Kubernetes' own OIDC sign-in does), else the access token (a provider that issues JWT
//   access tokens for the API's audience).
// - Before the token ends it is refreshed when the provider gave a refresh token; when it
//   cannot be (none given, or the provider refuses: its session ended), the session ends
//   cleanly and the sign-in page says so.
import { UserManager, WebStorageStateStore, type User } from 'oidc-client-ts';
import { session } from './session';

export interface OidcSignIn {
  issuer: string;
  clientId: string;
  audience: string;
  scopes: string[];
  usernameClaim: string;
  groupsClaim: string;
}

export interface SignInConfig {
  oidc: OidcSignIn | null;
}

/** Where the provider sends the browser back with the code. */
export const CALLBACK_PATH = '/auth/callback';

let manager: UserManager | null = null;
let settings: OidcSignIn | null = null;
let renewal: ReturnType<typeof setTimeout> | undefined;
/** Why the last sign-in with the provider failed, for the sign-in page. */
let failure: string | null = null;

export function signInFailure(): string | null {
  return failure;
}

/**
 * Reads how to sign in and, when the provider has just sent the browser back, finishes
 * signing in; else picks up this tab's provider session if it is still good. Called once,
 * before the app renders.
 */
export async function startSignIn(): Promise<SignInConfig> {
  let config: SignInConfig = { oidc: null };
  try {
    const response = await fetch('/api/v1/auth/config');
    if (response.ok) config = (await response.json()) as SignInConfig;
  } catch {
    // The API is down: token sign-in still shows, and says what is wrong when used.
  }
  if (!config.oidc) return config;
  settings = config.oidc;
  const store = new WebStorageStateStore({ store: window.sessionStorage });
  manager = new UserManager({
    authority: settings.issuer,
    client_id: settings.clientId,
    redirect_uri: `${window.location.origin}${CALLBACK_PATH}`,
    post_logout_redirect_uri: `${window.location.origin}/`,
    response_type: 'code',
    scope: settings.scopes.join(' '),
    userStore: store,
    stateStore: store,
    // Renewal is scheduled here, on the token the API is sent.
    automaticSilentRenew: false,
    loadUserInfo: false,
    monitorSession: false,
  });
  if (window.location.pathname === CALLBACK_PATH) {
    try {
      const user = await manager.signinRedirectCallback();
      use(user);
      const back = typeof user.state === 'string' ? user.state : '/';
      window.history.replaceState(null, '', back.startsWith('/') && !back.startsWith('//') ? back : '/');
    } catch (e) {
      failure = e instanceof Error ? e.message : String(e);
      window.history.replaceState(null, '', '/');
    }
  } else {
    if (window.location.pathname === '/' && new URLSearchParams(window.location.search).has('state')) {
      // Back from signing out at the provider: its `state` leaves the URL too.
      await manager.signoutRedirectCallback().catch(() => undefined);
      window.history.replaceState(null, '', '/');
    }
    const user = await manager.getUser();
    if (user && bearerExpiry(user) > Date.now()) use(user);
    else if (user) await manager.removeUser();
  }
  return config;
}

/** Off to the provider; back at `returnTo` once signed in. */
export async function signInWithProvider(returnTo: string): Promise<void> {
  if (!manager) throw new Error('single sign-on is not configured');
  failure = null;
  await manager.signinRedirect({ state: returnTo });
}

/** Ends the provider session too, where the provider has an end-session endpoint. */
export async function signOutOfProvider(): Promise<void> {
  clearTimeout(renewal);
  if (!manager) return;
  const user = await manager.getUser();
  await manager.removeUser();
  if (!user) return;
  const end = await manager.metadataService.getEndSessionEndpoint().catch(() => undefined);
  if (end) await manager.signoutRedirect({ id_token_hint: user.id_token });
}

/** The token the API is sent. */
function bearerOf(user: User): string {
  if (settings && settings.audience === settings.clientId && user.id_token) return user.id_token;
  return user.access_token;
}

/** When the token the API is sent ends (ms): its `exp`, else the response's `expires_in`. */
function bearerExpiry(user: User): number {
  const [, payload] = bearerOf(user).split('.');
  try {
    const claims = JSON.parse(atob((payload ?? '').replace(/-/g, '+').replace(/_/g, '/'))) as { exp?: number };
    if (typeof claims.exp === 'number') return claims.exp * 1000;
  } catch {
    // Not a JWT: the API would not take it either; the response's lifetime decides.
  }
  return (user.expires_at ?? 0) * 1000;
}

function use(user: User) {
  session.useProviderToken(bearerOf(user));
  const ends = bearerExpiry(user);
  const left = ends - Date.now();
  // Renew with a fifth of the lifetime (at least 5 s) to spare.
  const at = Math.max(0, left - Math.max(5_000, left / 5));
  clearTimeout(renewal);
  renewal = setTimeout(() => void renew(ends), at);
}

async function renew(ends: number) {
  const user = await manager?.getUser();
  if (manager && user?.refresh_token) {
    try {
      const fresh = await manager.signinSilent();
      if (fresh) {
        use(fresh);
        return;
      }
    } catch {
      // Refused: the provider's session ended (signed out there, or revoked).
    }
    await manager.removeUser();
    session.expire();
    return;
  }
  // No refresh token: the session lasts as long as the token.
  renewal = setTimeout(
    () => {
      void manager?.removeUser();
      session.expire();
    },
    Math.max(0, ends - Date.now()),
  );
}

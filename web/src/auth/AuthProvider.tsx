import { createContext, useContext, useSyncExternalStore, type ReactNode } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, call, type WhoAmI } from '../api/client';
import { session, type SessionState } from './session';
import { signOutOfProvider } from './oidc';
import { roleOn, type Role } from './roles';

interface Auth {
  state: SessionState;
  /** Who am I: pending until the first answer, so no page guesses the role. */
  whoami: { isPending: boolean; error: unknown };
  me: WhoAmI | undefined;
  signOut: () => void;
}

const AuthContext = createContext<Auth | null>(null);

export function AuthProvider({ children }: { children: ReactNode }) {
  const state = useSyncExternalStore(session.subscribe, session.state);
  const client = useQueryClient();
  const me = useQuery({
    queryKey: ['whoami'],
    queryFn: () => call(api.GET('/api/v1/whoami')),
    enabled: state === 'signed-in',
    staleTime: 60_000,
  });
  const value: Auth = {
    state,
    whoami: { isPending: me.isPending, error: me.error },
    me: state === 'signed-in' ? me.data : undefined,
    signOut: () => {
      const provider = session.isProvider();
      session.signOut();
      client.clear();
      // With single sign-on, the provider's session ends too where it can.
      if (provider) void signOutOfProvider();
    },
  };
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}

/** Renders its children once the caller is known; roles decide what they show. */
export function AuthGate({ children }: { children: ReactNode }) {
  const { me, whoami } = useAuth();
  if (me) return <>{children}</>;
  if (whoami.error) {
    return (
      <p className="state state-error" role="alert">
        modelplane could not say who you are ({whoami.error instanceof Error ? whoami.error.message : String(whoami.error)}).
        Reload the page to try again.
      </p>
    );
  }
  return (
    <p className="state" role="status">
      Signing in…
    </p>
  );
}

/**
 * The caller's role on `project`, as the API will judge it. A token's role and the
 * platform-admin role are in `whoami`; an OIDC user's comes from role bindings of the user
 * and their groups, which the API says through `…/me`. Until that answers, no role: the
 * page shows no control the API might refuse.
 */
export function useRole(project: string | undefined): Role {
  const { me } = useAuth();
  const bound = !!me && !!project && me.kind === 'user' && !me.platformAdmin;
  const access = useQuery({
    queryKey: ['me', me?.name, project],
    queryFn: () => call(api.GET('/api/v1/projects/{project}/me', { params: { path: { project: project ?? '' } } })),
    enabled: bound,
    staleTime: 30_000,
  });
  if (!bound) return roleOn(me, project);
  return access.data?.role ?? 'none';
}

export function useAuth(): Auth {
  const auth = useContext(AuthContext);
  if (!auth) throw new Error('useAuth outside AuthProvider');
  return auth;
}

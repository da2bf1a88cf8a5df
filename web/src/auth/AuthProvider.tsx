import { createContext, useContext, useSyncExternalStore, type ReactNode } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, call, type WhoAmI } from '../api/client';
import { session, type SessionState } from './session';
import { roleOn, type Role } from './roles';

interface Auth {
  state: SessionState;
  /** Who am I: pending until the first answer, so no page guesses the role. */
  whoami: { isPending: boolean; error: unknown };
  me: WhoAmI | undefined;
  signOut: () => void;
  roleOn: (project: string | undefined) => Role;
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
      session.signOut();
      client.clear();
    },
    roleOn: (project) => roleOn(state === 'signed-in' ? me.data : undefined, project),
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

export function useAuth(): Auth {
  const auth = useContext(AuthContext);
  if (!auth) throw new Error('useAuth outside AuthProvider');
  return auth;
}

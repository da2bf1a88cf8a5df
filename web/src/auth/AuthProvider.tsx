import { createContext, useContext, useSyncExternalStore, type ReactNode } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, call, type WhoAmI } from '../api/client';
import { session, type SessionState } from './session';
import { roleOn, type Role } from './roles';

interface Auth {
  state: SessionState;
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
    me: state === 'signed-in' ? me.data : undefined,
    signOut: () => {
      session.signOut();
      client.clear();
    },
    roleOn: (project) => roleOn(state === 'signed-in' ? me.data : undefined, project),
  };
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}

export function useAuth(): Auth {
  const auth = useContext(AuthContext);
  if (!auth) throw new Error('useAuth outside AuthProvider');
  return auth;
}

import type { WhoAmI } from '../api/client';

/** What the caller may do on a project, from most to least. */
export type Role = 'platform-admin' | 'admin' | 'editor' | 'viewer' | 'none';

const RANK: Record<Role, number> = { none: 0, viewer: 1, editor: 2, admin: 3, 'platform-admin': 4 };

/** The caller's role on `project` as `whoami` tells it: a token's, or platform admin. */
export function roleOn(me: WhoAmI | undefined, project: string | undefined): Role {
  if (!me) return 'none';
  if (me.platformAdmin) return 'platform-admin';
  if (me.kind === 'token') {
    if (!project || me.project !== project) return 'none';
    return (me.role as Role) ?? 'none';
  }
  // OIDC users: roles come from role bindings, which `useRole` asks the API for.
  return 'none';
}

export function atLeast(role: Role, needed: Exclude<Role, 'none'>): boolean {
  return RANK[role] >= RANK[needed];
}

/** Editors change deployments; admins manage tokens and role bindings. */
export const can = {
  edit: (role: Role) => atLeast(role, 'editor'),
  administer: (role: Role) => atLeast(role, 'admin'),
};

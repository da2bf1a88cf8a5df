import { useState, type FormEvent } from 'react';
import { useParams } from 'react-router';
import { useInfiniteQuery, useMutation, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, call, type Schemas } from '../api/client';
import { useAuth } from '../auth/AuthProvider';
import { can } from '../auth/roles';
import { CopyButton } from '../components/CopyButton';
import { Field } from '../components/Field';
import { Empty, ErrorState, Loading } from '../components/States';
import { useTitle } from '../components/Title';
import { Confirm } from './deployment/Confirm';
import { when } from './deployment/Status';

type Role = Schemas['Role'];
const ROLES: Role[] = ['viewer', 'editor', 'admin'];

/** A cursor-paged list with "Load more". */
function usePaged<T>(key: unknown[], load: (cursor?: string) => Promise<{ items: T[]; nextCursor?: string | null }>) {
  return useInfiniteQuery({
    queryKey: key,
    queryFn: ({ pageParam }) => load(pageParam),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.nextCursor ?? undefined,
  });
}

function RoleField(props: { label: string; error?: string; value: Role; onChange: (role: Role) => void }) {
  return (
    <Field label={props.label} error={props.error}>
      {(a) => (
        <select {...a} value={props.value} onChange={(e) => props.onChange(e.target.value as Role)}>
          {ROLES.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
      )}
    </Field>
  );
}

/** After a change to `list`: refetch it and the audit log, which records the change. */
function useRefresh(list: string, project: string) {
  const client = useQueryClient();
  return () => {
    void client.invalidateQueries({ queryKey: [list, project] });
    void client.invalidateQueries({ queryKey: ['audit', project] });
  };
}

function LoadMore({ query }: { query: { hasNextPage: boolean; isFetchingNextPage: boolean; fetchNextPage: () => unknown } }) {
  if (!query.hasNextPage) return null;
  return (
    <button type="button" className="btn" onClick={() => query.fetchNextPage()} disabled={query.isFetchingNextPage}>
      {query.isFetchingNextPage ? 'Loading…' : 'Load more'}
    </button>
  );
}

/** Tokens, role bindings and the audit log of a project: for its admins. */
export function ProjectSettings() {
  const { project = '' } = useParams();
  useTitle(`Tokens & access · ${project}`);
  const { roleOn } = useAuth();
  if (!can.administer(roleOn(project))) {
    return (
      <Empty title={`You need the admin role on ${project} to manage its tokens and access`}>
        <p>Ask an admin of {project} or a platform admin.</p>
      </Empty>
    );
  }
  return (
    <>
      <div className="page-head">
        <h1>Tokens &amp; access</h1>
      </div>
      <Tokens project={project} />
      <RoleBindings project={project} />
      <Audit project={project} />
    </>
  );
}

function Tokens({ project }: { project: string }) {
  const refresh = useRefresh('tokens', project);
  const tokens = usePaged(['tokens', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/tokens', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const [name, setName] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [expires, setExpires] = useState('');
  // The new secret lives only here, in memory, until "Done".
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const [revoking, setRevoking] = useState<Schemas['ApiToken'] | null>(null);
  const create = useMutation({
    mutationFn: () =>
      call(
        api.POST('/api/v1/projects/{project}/tokens', {
          params: { path: { project } },
          body: { name: name.trim(), role, expiresAt: expires ? new Date(`${expires}T00:00:00Z`).toISOString() : undefined },
        }),
      ),
    onSuccess: (created) => {
      setSecret({ name: created.name, value: created.secret });
      setName('');
      setExpires('');
      refresh();
    },
  });
  const revoke = useMutation({
    mutationFn: (id: string) =>
      call(api.DELETE('/api/v1/projects/{project}/tokens/{id}', { params: { path: { project, id } } })),
    onSuccess: refresh,
  });
  const fields = create.error instanceof ApiError ? create.error.fields : {};
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate();
  };
  const items = tokens.data?.pages.flatMap((p) => p.items) ?? [];

  return (
    <section className="card" aria-labelledby="tokens-title">
      <h2 id="tokens-title">API tokens</h2>
      {secret && (
        <div className="notice" role="status">
          <p>
            <strong>Token {secret.name} created.</strong> Copy its secret now: it is shown only once and cannot be shown again.
          </p>
          <p>
            <code className="secret">{secret.value}</code> <CopyButton text={secret.value} label="Copy secret" />
          </p>
          <button type="button" className="btn" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      )}
      <form onSubmit={submit} className="inline-form" aria-label="Create a token">
        <Field label="Token name" error={fields.name} hint="Letters, digits, '.', '_' or '-'.">
          {(a) => <input {...a} value={name} onChange={(e) => setName(e.target.value)} />}
        </Field>
        <RoleField label="Role" error={fields.role} value={role} onChange={setRole} />
        <Field label="Expires" error={fields.expiresAt} hint="Default: in 90 days.">
          {(a) => <input {...a} type="date" value={expires} onChange={(e) => setExpires(e.target.value)} />}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          Create token
        </button>
      </form>
      {create.error && !Object.keys(fields).length && <ErrorState error={create.error} />}
      {tokens.isPending ? (
        <Loading what="tokens" />
      ) : tokens.error ? (
        <ErrorState error={tokens.error} />
      ) : items.length === 0 ? (
        <p className="muted">No tokens yet.</p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col" className="hide-narrow">
                  Created
                </th>
                <th scope="col">Expires</th>
                <th scope="col" className="hide-narrow">
                  Last used
                </th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {items.map((t) => (
                <tr key={t.id}>
                  <td>{t.name}</td>
                  <td>{t.role}</td>
                  <td className="hide-narrow">
                    {when(t.createdAt)} by {t.createdBy}
                  </td>
                  <td>{t.expiresAt ? when(t.expiresAt) : 'never'}</td>
                  <td className="hide-narrow">{t.lastUsedAt ? when(t.lastUsedAt) : 'never'}</td>
                  <td>
                    {t.revokedAt ? (
                      <span className="badge badge-neutral">revoked {when(t.revokedAt)}</span>
                    ) : (
                      <button type="button" className="btn btn-small" onClick={() => setRevoking(t)}>
                        Revoke {t.name}
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <LoadMore query={tokens} />
      {revoke.error && <ErrorState error={revoke.error} />}
      {revoking && (
        <Confirm
          title={`Revoke token ${revoking.name}?`}
          confirm="Revoke"
          danger
          onCancel={() => setRevoking(null)}
          onConfirm={() => {
            revoke.mutate(revoking.id);
            setRevoking(null);
          }}
        >
          <p>Every call made with it fails from now on, including open live streams. This cannot be undone.</p>
        </Confirm>
      )}
    </section>
  );
}

function RoleBindings({ project }: { project: string }) {
  const refresh = useRefresh('role-bindings', project);
  const bindings = usePaged(['role-bindings', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/role-bindings', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const [kind, setKind] = useState<'user' | 'group'>('group');
  const [subject, setSubject] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [removing, setRemoving] = useState<Schemas['RoleBinding'] | null>(null);
  const create = useMutation({
    mutationFn: () =>
      call(
        api.POST('/api/v1/projects/{project}/role-bindings', {
          params: { path: { project } },
          body: { subjectKind: kind, subject: subject.trim(), role },
        }),
      ),
    onSuccess: () => {
      setSubject('');
      refresh();
    },
  });
  const remove = useMutation({
    mutationFn: (id: string) =>
      call(api.DELETE('/api/v1/projects/{project}/role-bindings/{id}', { params: { path: { project, id } } })),
    onSuccess: refresh,
  });
  const fields = create.error instanceof ApiError ? create.error.fields : {};
  const items = bindings.data?.pages.flatMap((p) => p.items) ?? [];
  return (
    <section className="card" aria-labelledby="bindings-title">
      <h2 id="bindings-title">Role bindings</h2>
      <p className="hint">
        Roles for people who sign in with your identity provider (OIDC): a user by their subject, or everyone in a group.
      </p>
      <form
        className="inline-form"
        aria-label="Add a role binding"
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Field label="Subject kind" error={fields.subjectKind}>
          {(a) => (
            <select {...a} value={kind} onChange={(e) => setKind(e.target.value as 'user' | 'group')}>
              <option value="group">group</option>
              <option value="user">user</option>
            </select>
          )}
        </Field>
        <Field label="Subject" error={fields.subject}>
          {(a) => <input {...a} value={subject} onChange={(e) => setSubject(e.target.value)} />}
        </Field>
        <RoleField label="Binding role" error={fields.role} value={role} onChange={setRole} />
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          Add binding
        </button>
      </form>
      {create.error && !Object.keys(fields).length && <ErrorState error={create.error} />}
      {bindings.error ? (
        <ErrorState error={bindings.error} />
      ) : items.length === 0 ? (
        <p className="muted">{bindings.isPending ? 'Loading…' : 'No role bindings.'}</p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Subject</th>
                <th scope="col">Role</th>
                <th scope="col" className="hide-narrow">
                  Created
                </th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {items.map((b) => (
                <tr key={b.id}>
                  <td>
                    {b.subjectKind} <strong>{b.subject}</strong>
                  </td>
                  <td>{b.role}</td>
                  <td className="hide-narrow">
                    {when(b.createdAt)} by {b.createdBy}
                  </td>
                  <td>
                    <button type="button" className="btn btn-small" onClick={() => setRemoving(b)}>
                      Remove {b.subject}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <LoadMore query={bindings} />
      {remove.error && <ErrorState error={remove.error} />}
      {removing && (
        <Confirm
          title={`Remove ${removing.subjectKind} ${removing.subject}'s ${removing.role} role?`}
          confirm="Remove"
          danger
          onCancel={() => setRemoving(null)}
          onConfirm={() => {
            remove.mutate(removing.id);
            setRemoving(null);
          }}
        />
      )}
    </section>
  );
}

function Audit({ project }: { project: string }) {
  const audit = usePaged(['audit', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/audit', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const items = audit.data?.pages.flatMap((p) => p.items) ?? [];
  return (
    <section className="card" aria-labelledby="audit-title">
      <h2 id="audit-title">Audit log</h2>
      {audit.error ? (
        <ErrorState error={audit.error} />
      ) : items.length === 0 ? (
        <p className="muted">{audit.isPending ? 'Loading…' : 'Nothing recorded yet.'}</p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">What</th>
                <th scope="col">Target</th>
                <th scope="col" className="hide-narrow">
                  Details
                </th>
              </tr>
            </thead>
            <tbody>
              {items.map((e) => (
                <tr key={e.id}>
                  <td>
                    <time dateTime={e.createdAt}>{when(e.createdAt)}</time>
                  </td>
                  <td>{e.actor}</td>
                  <td>{e.kind}</td>
                  <td>{e.target}</td>
                  <td className="hide-narrow">{e.message}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <LoadMore query={audit} />
    </section>
  );
}

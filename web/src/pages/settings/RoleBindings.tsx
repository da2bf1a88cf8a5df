// Role bindings: roles on this project for people who sign in through OIDC.
import { useState } from 'react';
import { useMutation } from '@tanstack/react-query';
import { api, ApiError, call, type Schemas } from '../../api/client';
import { Field } from '../../components/Field';
import { ErrorState, Loading } from '../../components/States';
import { Confirm } from '../deployment/Confirm';
import { when } from '../deployment/Status';
import { LoadMore, RoleField, usePaged, useRefresh, type Role } from './common';

type SubjectKind = 'user' | 'group';

export function RoleBindings({ project }: { project: string }) {
  const refresh = useRefresh('role-bindings', project);
  const bindings = usePaged(['role-bindings', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/role-bindings', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const [kind, setKind] = useState<SubjectKind>('group');
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
        className="inline-form settings-form"
        aria-label="Add a role binding"
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Field label="Subject kind" error={fields.subjectKind}>
          {(a) => (
            <select {...a} value={kind} onChange={(e) => setKind(e.target.value as SubjectKind)}>
              <option value="group">group</option>
              <option value="user">user</option>
            </select>
          )}
        </Field>
        <Field label="Subject" error={fields.subject} hint={kind === 'group' ? 'A group name from the groups claim.' : "The user's subject (sub) claim."}>
          {(a) => <input {...a} value={subject} autoComplete="off" onChange={(e) => setSubject(e.target.value)} />}
        </Field>
        <RoleField label="Binding role" error={fields.role} value={role} onChange={setRole} />
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          Add binding
        </button>
      </form>
      {create.error && !Object.keys(fields).length && <ErrorState error={create.error} />}
      {bindings.isPending ? (
        <Loading what="role bindings" />
      ) : bindings.error ? (
        <ErrorState error={bindings.error} />
      ) : items.length === 0 ? (
        <p className="muted">No role bindings: only tokens reach this project so far.</p>
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
        >
          <p>It stops granting this role on {project} from the next request (another binding may still grant one).</p>
        </Confirm>
      )}
    </section>
  );
}

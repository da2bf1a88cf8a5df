// The project's API tokens: list, create (the secret shown once), revoke.
import { useEffect, useRef, useState, type FormEvent } from 'react';
import { useMutation } from '@tanstack/react-query';
import { api, ApiError, call, type Schemas } from '../../api/client';
import { CopyButton } from '../../components/CopyButton';
import { Field } from '../../components/Field';
import { ErrorState, Loading } from '../../components/States';
import { Confirm } from '../deployment/Confirm';
import { when } from '../deployment/Status';
import { LoadMore, RoleField, usePaged, useRefresh, type Role } from './common';

type Token = Schemas['ApiToken'];

/** Today as `YYYY-MM-DD` in the browser's time zone (the earliest date the picker offers). */
function today(): string {
  const d = new Date();
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

/** A picked date means "works through that day", in the browser's time zone. */
function endOfDay(date: string): string {
  return new Date(`${date}T23:59:59`).toISOString();
}

export function Tokens({ project }: { project: string }) {
  const refresh = useRefresh('tokens', project);
  const tokens = usePaged(['tokens', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/tokens', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const [name, setName] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [expires, setExpires] = useState('');
  // The new secret lives only in this state, until "Done": never in the query cache, storage or a URL.
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const [revoking, setRevoking] = useState<Token | null>(null);
  const nameRef = useRef<HTMLInputElement>(null);
  const secretRef = useRef<HTMLHeadingElement>(null);

  const create = useMutation({
    mutationFn: async () => {
      const created = await call(
        api.POST('/api/v1/projects/{project}/tokens', {
          params: { path: { project } },
          body: { name: name.trim(), role, expiresAt: expires ? endOfDay(expires) : undefined },
        }),
      );
      // Split the secret off here, so the mutation's cached result never holds it.
      const { secret: value, ...token } = created;
      setSecret({ name: token.name, value });
      return token;
    },
    onSuccess: () => {
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

  // Take keyboard and screen-reader users to the secret as soon as it appears.
  useEffect(() => {
    if (secret) secretRef.current?.focus();
  }, [secret]);

  const fields = create.error instanceof ApiError ? create.error.fields : {};
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate();
  };
  const done = () => {
    setSecret(null);
    nameRef.current?.focus();
  };
  const items = tokens.data?.pages.flatMap((p) => p.items) ?? [];

  return (
    <section className="card" aria-labelledby="tokens-title">
      <h2 id="tokens-title">API tokens</h2>
      <p className="hint">
        Tokens let scripts and CI call modelplane on this project: send one as <code>Authorization: Bearer &lt;secret&gt;</code>.
      </p>
      {secret && (
        <div className="notice notice-secret" aria-labelledby="secret-title">
          <h3 id="secret-title" tabIndex={-1} ref={secretRef}>
            Token {secret.name} created
          </h3>
          <p>Copy its secret now: it is shown only once and cannot be shown again.</p>
          <p className="secret-line">
            <code className="secret">{secret.value}</code> <CopyButton text={secret.value} label="Copy secret" />
          </p>
          <button type="button" className="btn" onClick={done}>
            Done
          </button>
        </div>
      )}
      <form onSubmit={submit} className="inline-form settings-form" aria-label="Create a token">
        <Field label="Token name" error={fields.name} hint="Letters, digits, '.', '_' or '-'.">
          {(a) => <input {...a} ref={nameRef} value={name} autoComplete="off" onChange={(e) => setName(e.target.value)} />}
        </Field>
        <RoleField label="Role" error={fields.role} value={role} onChange={setRole} />
        <Field label="Expires" error={fields.expiresAt} hint="Works through that day. Default: 90 days.">
          {(a) => <input {...a} type="date" min={today()} value={expires} onChange={(e) => setExpires(e.target.value)} />}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          {create.isPending ? 'Creating…' : 'Create token'}
        </button>
      </form>
      {create.error && !Object.keys(fields).length && <ErrorState error={create.error} />}
      {tokens.isPending ? (
        <Loading what="tokens" />
      ) : tokens.error ? (
        <ErrorState error={tokens.error} />
      ) : items.length === 0 ? (
        <p className="muted">No tokens yet: create one above for a script or a CI job.</p>
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
                <TokenRow key={t.id} token={t} onRevoke={() => setRevoking(t)} />
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

function TokenRow({ token: t, onRevoke }: { token: Token; onRevoke: () => void }) {
  const expired = !t.revokedAt && !!t.expiresAt && Date.parse(t.expiresAt) <= Date.now();
  return (
    <tr>
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
        ) : expired ? (
          <span className="badge badge-neutral">expired</span>
        ) : (
          <button type="button" className="btn btn-small" onClick={onRevoke}>
            Revoke {t.name}
          </button>
        )}
      </td>
    </tr>
  );
}

// The project's model keys: credentials for calling its models through the Gateway. List,
// create (the secret shown once), revoke.
import { useEffect, useRef, useState, type FormEvent } from 'react';
import { useMutation, useQuery } from '@tanstack/react-query';
import { api, ApiError, call, type Schemas } from '../../api/client';
import { CopyButton } from '../../components/CopyButton';
import { Field } from '../../components/Field';
import { ErrorState, Loading } from '../../components/States';
import { Confirm } from '../deployment/Confirm';
import { when } from '../deployment/Status';
import { LoadMore, usePaged, useRefresh } from './common';

type Key = Schemas['ModelKey'];

/** "qwen, llama" as a list of names; empty: every deployment of the project. */
function names(text: string): string[] | undefined {
  const list = text
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  return list.length ? list : undefined;
}

/** A whole number from a field, or nothing when it is empty. */
function count(text: string): number | undefined {
  return text.trim() === '' ? undefined : Number(text);
}

/** The server names list entries `deployments[i]`: show them all under the one field. */
function deploymentsError(fields: Record<string, string>): string | undefined {
  const messages = Object.entries(fields)
    .filter(([field]) => field === 'deployments' || field.startsWith('deployments['))
    .map(([, message]) => message);
  return messages.length ? messages.join('; ') : undefined;
}

export function ModelKeys({ project }: { project: string }) {
  const refresh = useRefresh('model-keys', project);
  const keys = usePaged(['model-keys', project], (cursor) =>
    call(api.GET('/api/v1/projects/{project}/keys', { params: { path: { project }, query: { limit: 50, cursor } } })),
  );
  const [name, setName] = useState('');
  const [deployments, setDeployments] = useState('');
  const [rate, setRate] = useState('');
  const [budget, setBudget] = useState('');
  const [atOnce, setAtOnce] = useState('');
  // The new secret lives only in this state, until "Done": never in the query cache, storage or a URL.
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const [revoking, setRevoking] = useState<Key | null>(null);
  const nameRef = useRef<HTMLInputElement>(null);
  const secretRef = useRef<HTMLHeadingElement>(null);

  const create = useMutation({
    mutationFn: async () => {
      const created = await call(
        api.POST('/api/v1/projects/{project}/keys', {
          params: { path: { project } },
          body: {
            name: name.trim(),
            deployments: names(deployments),
            requestsPerMinute: count(rate),
            dailyTokenBudget: count(budget),
            maxConcurrent: count(atOnce),
          },
        }),
      );
      // Split the secret off here, so the mutation's cached result never holds it.
      const { secret: value, ...key } = created;
      setSecret({ name: key.name, value });
      return key;
    },
    onSuccess: () => {
      setName('');
      setDeployments('');
      setRate('');
      setBudget('');
      setAtOnce('');
      refresh();
    },
  });
  const revoke = useMutation({
    mutationFn: (id: string) => call(api.DELETE('/api/v1/projects/{project}/keys/{id}', { params: { path: { project, id } } })),
    onSuccess: refresh,
  });

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
  const items = keys.data?.pages.flatMap((p) => p.items) ?? [];

  return (
    <section className="card" aria-labelledby="model-keys-title">
      <h2 id="model-keys-title">Model keys</h2>
      <p className="hint">
        Keys let applications call this project&apos;s models through the Gateway (not manage modelplane): an OpenAI client sends one
        as its API key.
      </p>
      {secret && (
        <div className="notice notice-secret" aria-labelledby="key-secret-title">
          <h3 id="key-secret-title" tabIndex={-1} ref={secretRef}>
            Model key {secret.name} created
          </h3>
          <p>Copy its secret now: it is shown only once and cannot be shown again.</p>
          <p className="secret-line">
            <code className="secret">{secret.value}</code> <CopyButton text={secret.value} label="Copy key" />
          </p>
          <button type="button" className="btn" onClick={done}>
            Done
          </button>
        </div>
      )}
      <form onSubmit={submit} className="inline-form settings-form" aria-label="Create a model key">
        <Field label="Key name" error={fields.name} hint="Letters, digits, '.', '_' or '-'.">
          {(a) => <input {...a} ref={nameRef} value={name} autoComplete="off" onChange={(e) => setName(e.target.value)} />}
        </Field>
        <Field label="Deployments" error={deploymentsError(fields)} hint="Names, comma-separated. Empty: every deployment.">
          {(a) => <input {...a} value={deployments} autoComplete="off" onChange={(e) => setDeployments(e.target.value)} />}
        </Field>
        <Field label="Requests a minute" error={fields.requestsPerMinute} hint="Empty: no limit.">
          {(a) => <input {...a} type="number" min={1} inputMode="numeric" value={rate} onChange={(e) => setRate(e.target.value)} />}
        </Field>
        <Field label="Requests at once" error={fields.maxConcurrent} hint="Empty: no limit.">
          {(a) => <input {...a} type="number" min={1} inputMode="numeric" value={atOnce} onChange={(e) => setAtOnce(e.target.value)} />}
        </Field>
        <Field
          label="Tokens a day"
          error={fields.dailyTokenBudget}
          hint="Empty: no budget. Counted from the models' metrics, about half a minute behind (so a key can pass it by what it uses meanwhile)."
        >
          {(a) => <input {...a} type="number" min={1} inputMode="numeric" value={budget} onChange={(e) => setBudget(e.target.value)} />}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          {create.isPending ? 'Creating…' : 'Create key'}
        </button>
      </form>
      {create.error && !Object.keys(fields).length && <ErrorState error={create.error} />}
      {keys.isPending ? (
        <Loading what="model keys" />
      ) : keys.error ? (
        <ErrorState error={keys.error} />
      ) : items.length === 0 ? (
        <p className="muted">No model keys yet: create one above for an application.</p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Key</th>
                <th scope="col">Deployments</th>
                <th scope="col" className="hide-narrow">
                  Limits
                </th>
                <th scope="col" className="hide-narrow">
                  Requests (30 days)
                </th>
                <th scope="col" className="hide-narrow">
                  Tokens (30 days)
                </th>
                <th scope="col" className="hide-narrow">
                  Last used
                </th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {items.map((k) => (
                <KeyRow key={k.id} project={project} modelKey={k} onRevoke={() => setRevoking(k)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      <LoadMore query={keys} />
      {revoke.error && <ErrorState error={revoke.error} />}
      {revoking && (
        <Confirm
          title={`Revoke model key ${revoking.name}?`}
          confirm="Revoke"
          danger
          onCancel={() => setRevoking(null)}
          onConfirm={() => {
            revoke.mutate(revoking.id);
            setRevoking(null);
          }}
        >
          <p>Every call to a model with it fails from now on. This cannot be undone.</p>
        </Confirm>
      )}
    </section>
  );
}

function KeyRow({ project, modelKey: k, onRevoke }: { project: string; modelKey: Key; onRevoke: () => void }) {
  const usage = useQuery({
    queryKey: ['model-keys', project, k.id, 'usage'],
    queryFn: () =>
      call(api.GET('/api/v1/projects/{project}/keys/{id}/usage', { params: { path: { project, id: k.id }, query: { days: 30 } } })),
  });
  const expired = !k.revokedAt && !!k.expiresAt && Date.parse(k.expiresAt) <= Date.now();
  const limits = [
    k.requestsPerMinute != null ? `${k.requestsPerMinute.toLocaleString()} requests/min` : null,
    k.maxConcurrent != null ? `${k.maxConcurrent.toLocaleString()} at once` : null,
    k.dailyTokenBudget != null ? `${k.dailyTokenBudget.toLocaleString()} tokens/day` : null,
  ].filter(Boolean);
  return (
    <tr>
      <td>{k.name}</td>
      <td>
        <code>{k.prefix}…</code>
      </td>
      <td>{k.deployments ? k.deployments.join(', ') : 'every deployment'}</td>
      <td className="hide-narrow">{limits.length ? limits.join(', ') : 'none'}</td>
      <td className="hide-narrow">{usage.data ? usage.data.requests.toLocaleString() : usage.error ? 'unknown' : '…'}</td>
      <td className="hide-narrow" title="Its share of the tokens of the deployments it called, by requests">
        {usage.data ? usage.data.tokens.toLocaleString() : usage.error ? 'unknown' : '…'}
      </td>
      <td className="hide-narrow">{k.lastUsedAt ? when(k.lastUsedAt) : 'never'}</td>
      <td>
        {k.revokedAt ? (
          <span className="badge badge-neutral">revoked {when(k.revokedAt)}</span>
        ) : expired ? (
          <span className="badge badge-neutral">expired</span>
        ) : (
          <button type="button" className="btn btn-small" onClick={onRevoke}>
            Revoke {k.name}
          </button>
        )}
      </td>
    </tr>
  );
}

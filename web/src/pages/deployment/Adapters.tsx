// LoRA adapters of the base model: each served under its own `model` name, with on how many
// serving pods it is loaded; editors add and remove them (running pods load and unload them
// without a restart).
import { useState, type FormEvent } from 'react';
import { useMutation } from '@tanstack/react-query';
import { api, ApiError, call, type Deployment } from '../../api/client';
import { ErrorState } from '../../components/States';
import { Confirm } from './Confirm';

export function Adapters({ deployment, editable }: { deployment: Deployment; editable: boolean }) {
  const { project, name } = deployment;
  const listed = deployment.spec.adapters ?? [];
  const statuses = deployment.status.adapters ?? [];
  const [adapter, setAdapter] = useState('');
  const [source, setSource] = useState('');
  const [secret, setSecret] = useState('');
  const [removing, setRemoving] = useState<string | null>(null);
  const add = useMutation({
    mutationFn: () =>
      call(
        api.POST('/api/v1/projects/{project}/deployments/{name}/adapters', {
          params: { path: { project, name } },
          body: {
            name: adapter.trim(),
            source: source.trim(),
            ...(s3 && secret.trim() ? { secretRef: { name: secret.trim() } } : {}),
          },
        }),
      ),
    onSuccess: () => {
      setAdapter('');
      setSource('');
      setSecret('');
    },
  });
  const remove = useMutation({
    mutationFn: (which: string) =>
      call(
        api.DELETE('/api/v1/projects/{project}/deployments/{name}/adapters/{adapter}', {
          params: { path: { project, name, adapter: which } },
        }),
      ),
  });
  const engine = deployment.spec.engine?.kind ?? 'vllm';
  // Only the fetcher of s3:// adapters uses a Secret.
  const s3 = source.trim().startsWith('s3://');
  if (listed.length === 0 && !(editable && (engine === 'vllm' || engine === 'sim'))) {
    return null;
  }
  const fieldError = (field: string) =>
    add.error instanceof ApiError ? add.error.fields[field] : undefined;
  const nameError = fieldError('name');
  const sourceError = fieldError('source');
  const secretError = fieldError('secretRef.name') ?? fieldError('secretRef');
  const otherError = add.error && !nameError && !sourceError && !secretError ? add.error : null;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    add.mutate();
  };
  return (
    <section className="card" aria-labelledby="adapters-title">
      <h2 id="adapters-title">LoRA adapters</h2>
      {listed.length === 0 ? (
        <p className="muted">
          None. An adapter is served under its own model name; adding the first one restarts the pods once (the engine
          enables LoRA when it starts), later ones load without a restart.
        </p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Model name</th>
                <th scope="col">Source</th>
                <th scope="col">Loaded</th>
                {editable && (
                  <th scope="col">
                    <span className="visually-hidden">Actions</span>
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {listed.map((a) => {
                const s = statuses.find((x) => x.name === a.name);
                const everywhere = s && s.pods > 0 && s.loaded === s.pods;
                return (
                  <tr key={a.name}>
                    <td className="mono">{a.name}</td>
                    <td className="mono">{a.source}</td>
                    <td>
                      {s ? (
                        <>
                          <span className={`badge badge-${everywhere ? 'ok' : s.message ? 'bad' : 'neutral'}`}>
                            {s.loaded} of {s.pods} pods
                          </span>
                          {s.message && <div>{s.message}</div>}
                        </>
                      ) : (
                        <span className="muted">not reported yet</span>
                      )}
                    </td>
                    {editable && (
                      <td>
                        <button
                          type="button"
                          className="btn btn-danger"
                          onClick={() => setRemoving(a.name)}
                          disabled={remove.isPending}
                          aria-label={`Remove adapter ${a.name}`}
                        >
                          Remove
                        </button>
                      </td>
                    )}
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {remove.error && <ErrorState error={remove.error} />}
      {editable && (
        <form className="inline-form" onSubmit={submit} aria-label="Add an adapter">
          <div className={`field${nameError ? ' field-invalid' : ''}`}>
            <label htmlFor="adapter-name">Model name</label>
            <input
              id="adapter-name"
              value={adapter}
              onChange={(e) => setAdapter(e.target.value)}
              placeholder="sql-lora"
              required
              aria-invalid={nameError ? true : undefined}
              aria-describedby={nameError ? 'adapter-name-error' : undefined}
            />
            {nameError && (
              <p className="field-error" id="adapter-name-error" role="alert">
                {nameError}
              </p>
            )}
          </div>
          <div className={`field${sourceError ? ' field-invalid' : ''}`}>
            <label htmlFor="adapter-source">Source</label>
            <input
              id="adapter-source"
              value={source}
              onChange={(e) => setSource(e.target.value)}
              placeholder="hf://org/name, pvc://claim/path or s3://bucket/prefix"
              required
              aria-invalid={sourceError ? true : undefined}
              aria-describedby={sourceError ? 'adapter-source-error' : undefined}
            />
            {sourceError && (
              <p className="field-error" id="adapter-source-error" role="alert">
                {sourceError}
              </p>
            )}
          </div>
          {s3 && (
            <div className={`field${secretError ? ' field-invalid' : ''}`}>
              <label htmlFor="adapter-secret">S3 credentials Secret (optional)</label>
              <input
                id="adapter-secret"
                value={secret}
                onChange={(e) => setSecret(e.target.value)}
                placeholder="loras-s3"
                aria-invalid={secretError ? true : undefined}
                aria-describedby={secretError ? 'adapter-secret-error' : 'adapter-secret-help'}
              />
              {secretError ? (
                <p className="field-error" id="adapter-secret-error" role="alert">
                  {secretError}
                </p>
              ) : (
                <p className="muted" id="adapter-secret-help">
                  Its keys (AWS_ACCESS_KEY_ID, …) become the pods' adapter fetcher's environment.
                </p>
              )}
            </div>
          )}
          <button type="submit" className="btn btn-primary" disabled={add.isPending}>
            Add adapter
          </button>
          {otherError && <ErrorState error={otherError} />}
        </form>
      )}
      {removing && (
        <Confirm
          title={`Remove adapter ${removing}?`}
          confirm="Remove adapter"
          onCancel={() => setRemoving(null)}
          onConfirm={() => {
            const which = removing;
            setRemoving(null);
            remove.mutate(which);
          }}
        >
          <p>Requests naming {removing} get a 404 from the model servers once they unload it; the pods keep running.</p>
        </Confirm>
      )}
    </section>
  );
}

// Editing the spec as JSON (sent as a merge patch guarded by the ETag), and deleting with a
// typed confirmation.
import { useState } from 'react';
import { useNavigate } from 'react-router';
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, call, callWithHeaders, type Deployment } from '../../api/client';
import { ErrorState } from '../../components/States';
import { Confirm } from './Confirm';
import { mergePatch } from './diff';

export function EditSpec({ deployment }: { deployment: Deployment }) {
  const { project, name } = deployment;
  const client = useQueryClient();
  // The spec and ETag the editor started from: a change made since is a 412, not lost work.
  const [base, setBase] = useState<{ spec: Deployment['spec']; etag: string } | null>(null);
  const [text, setText] = useState('');
  const [parseError, setParseError] = useState<string | null>(null);
  const open = useMutation({
    mutationFn: () =>
      callWithHeaders(api.GET('/api/v1/projects/{project}/deployments/{name}', { params: { path: { project, name } } })),
    onSuccess: ({ data, headers }) => {
      setBase({ spec: data.spec, etag: headers.get('ETag') ?? '' });
      setText(JSON.stringify(data.spec, null, 2));
      setParseError(null);
      save.reset();
    },
  });
  const save = useMutation({
    mutationFn: async (spec: unknown) => {
      if (!base) throw new Error('the editor is not open');
      return call(
        api.PATCH('/api/v1/projects/{project}/deployments/{name}', {
          params: { path: { project, name }, header: { 'If-Match': base.etag } },
          body: { spec: mergePatch(base.spec, spec) } as never,
          headers: { 'Content-Type': 'application/merge-patch+json' },
        }),
      );
    },
    onSuccess: (updated) => {
      client.setQueryData(['deployment', project, name], updated);
      setBase(null);
    },
  });
  const submit = () => {
    let spec: unknown;
    try {
      spec = JSON.parse(text);
    } catch (e) {
      setParseError(`Not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    setParseError(null);
    save.mutate(spec);
  };
  const error = save.error instanceof ApiError ? save.error : null;
  const conflict = error?.status === 412;

  return (
    <section className="card" aria-labelledby="edit-title">
      <h2 id="edit-title">Edit</h2>
      {!base ? (
        <>
          <p className="hint">Change any part of the spec; a change to the pods rolls them out again.</p>
          <button type="button" className="btn" onClick={() => open.mutate()} disabled={open.isPending}>
            Edit spec
          </button>
          {save.isSuccess && <p role="status">Saved: generation {save.data.generation} is rolling out.</p>}
          {open.error && <ErrorState error={open.error} />}
        </>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            submit();
          }}
        >
          <div className={`field${parseError || error ? ' field-invalid' : ''}`}>
            <label htmlFor="spec-json">Spec (JSON)</label>
            <textarea
              id="spec-json"
              rows={18}
              spellCheck={false}
              value={text}
              onChange={(e) => setText(e.target.value)}
              aria-invalid={parseError || error ? true : undefined}
              aria-describedby="spec-json-errors"
            />
            <div id="spec-json-errors">
              {parseError && (
                <p className="field-error" role="alert">
                  {parseError}
                </p>
              )}
              {conflict && (
                <div className="state state-error" role="alert">
                  <p>
                    <strong>Someone changed this deployment since you opened the editor.</strong> Your edit was not saved.
                    Reload the current spec and apply your change again.
                  </p>
                  <button type="button" className="btn" onClick={() => open.mutate()}>
                    Reload the current spec
                  </button>
                </div>
              )}
              {error && !conflict && error.problem.errors?.length ? (
                <ul className="field-error" role="alert">
                  {error.problem.errors.map((f) => (
                    <li key={f.field}>
                      <code>{f.field}</code>: {f.message}
                    </li>
                  ))}
                </ul>
              ) : null}
              {save.error && !conflict && !error?.problem.errors?.length && <ErrorState error={save.error} />}
            </div>
          </div>
          <div className="actions-row">
            <button type="submit" className="btn btn-primary" disabled={save.isPending}>
              Save
            </button>
            <button type="button" className="btn" onClick={() => setBase(null)}>
              Cancel
            </button>
          </div>
        </form>
      )}
    </section>
  );
}

export function DeleteDeployment({ deployment }: { deployment: Deployment }) {
  const { project, name } = deployment;
  const navigate = useNavigate();
  const [open, setOpen] = useState(false);
  const [typed, setTyped] = useState('');
  const remove = useMutation({
    mutationFn: () =>
      call(api.DELETE('/api/v1/projects/{project}/deployments/{name}', { params: { path: { project, name } } })),
    onSuccess: () => navigate(`/projects/${encodeURIComponent(project)}/deployments`),
  });
  return (
    <>
      <button type="button" className="btn btn-danger" onClick={() => setOpen(true)} disabled={!!deployment.deletionRequestedAt}>
        Delete
      </button>
      {open && (
        <Confirm
          title={`Delete ${name}?`}
          confirm="Delete"
          danger
          disabled={typed !== name || remove.isPending}
          onCancel={() => {
            setOpen(false);
            setTyped('');
          }}
          onConfirm={() => remove.mutate()}
        >
          <p>
            Its pods, Service and route are removed from the cluster; its timeline is kept. This cannot be undone.
          </p>
          <div className="field">
            <label htmlFor="delete-name">Deployment name</label>
            <input id="delete-name" autoComplete="off" value={typed} onChange={(e) => setTyped(e.target.value)} aria-describedby="delete-hint" />
            <p className="hint" id="delete-hint">
              Type <strong>{name}</strong> to confirm.
            </p>
          </div>
          {remove.error && <ErrorState error={remove.error} />}
        </Confirm>
      )}
    </>
  );
}

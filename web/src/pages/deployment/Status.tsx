// The deployment's state: conditions, replicas (with scale and restart), endpoints with a
// ready-to-paste curl, and the Kubernetes objects it owns.
import { useState, type FormEvent } from 'react';
import { useMutation, useQuery } from '@tanstack/react-query';
import { api, ApiError, call, type Deployment } from '../../api/client';
import { graphql } from '../../api/graphql';
import { CopyButton } from '../../components/CopyButton';
import { ReplicaBar } from '../../components/ReplicaBar';
import { ErrorState } from '../../components/States';
import { Confirm } from './Confirm';


/** When, relative and readable. */
export function when(iso: string): string {
  const d = new Date(iso);
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
}

export function Conditions({ deployment }: { deployment: Deployment }) {
  const conditions = deployment.status.conditions;
  return (
    <section className="card" aria-labelledby="conditions-title">
      <h2 id="conditions-title">Conditions</h2>
      {conditions.length === 0 ? (
        <p className="muted">None reported yet: the worker has not looked at this deployment.</p>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Condition</th>
                <th scope="col">Holds</th>
                <th scope="col">Why</th>
                <th scope="col" className="hide-narrow">
                  Since
                </th>
              </tr>
            </thead>
            <tbody>
              {conditions.map((c) => (
                <tr key={c.type}>
                  <td>{c.type}</td>
                  <td>
                    <span className={`badge badge-${c.status === 'True' ? 'ok' : c.status === 'False' ? 'bad' : 'neutral'}`}>
                      {c.status === 'True' ? 'Yes' : c.status === 'False' ? 'No' : 'Unknown'}
                    </span>
                  </td>
                  <td>
                    <strong>{c.reason}</strong>
                    {c.message && <div>{c.message}</div>}
                  </td>
                  <td className="hide-narrow">
                    <time dateTime={c.lastTransitionTime}>{when(c.lastTransitionTime)}</time>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function Replicas({ deployment, editable }: { deployment: Deployment; editable: boolean }) {
  const { project, name } = deployment;
  const r = deployment.status.replicas;
  const [replicas, setReplicas] = useState(String(deployment.spec.replicas ?? r.desired));
  const [confirmRestart, setConfirmRestart] = useState(false);
  const scale = useMutation({
    mutationFn: (n: number) =>
      call(
        api.POST('/api/v1/projects/{project}/deployments/{name}/scale', {
          params: { path: { project, name } },
          body: { replicas: n },
        }),
      ),
  });
  const restart = useMutation({
    mutationFn: () =>
      call(api.POST('/api/v1/projects/{project}/deployments/{name}/restart', { params: { path: { project, name } } })),
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    scale.mutate(Number(replicas));
  };
  const scaleError = scale.error instanceof ApiError ? (scale.error.fields.replicas ?? scale.error.message) : scale.error?.message;
  const autoscaled = !!deployment.spec.autoscaling;
  const roles = !!deployment.spec.disaggregation;
  const nodes = deployment.spec.nodesPerReplica ?? 1;
  return (
    <section className="card" aria-labelledby="replicas-title">
      <h2 id="replicas-title">Replicas</h2>
      <p>
        <ReplicaBar replicas={r} /> ready of {r.desired} wanted · {r.updated} on the current spec · {r.available}{' '}
        available
      </p>
      {nodes > 1 && (
        <p className="muted" data-testid="group-size">
          Each replica spans {nodes} nodes: a LeaderWorkerSet group of one leader (which serves the API) and {nodes - 1}{' '}
          worker{nodes > 2 ? 's' : ''}. A replica is ready when all its pods are; if one fails, its group restarts whole.
        </p>
      )}
      {autoscaled && <Autoscaling deployment={deployment} />}
      {roles && <Roles deployment={deployment} editable={editable} />}
      {editable && (
        <form className="inline-form" onSubmit={submit}>
          {!autoscaled && !roles && (
            <>
          <CountField id="scale-replicas" label="Replicas" value={replicas} onChange={setReplicas} error={scaleError} />
          <button type="submit" className="btn btn-primary" disabled={scale.isPending}>
            Scale
          </button>
            </>
          )}
          <button type="button" className="btn" onClick={() => setConfirmRestart(true)} disabled={restart.isPending}>
            Restart
          </button>
          {restart.isSuccess && <span role="status">Restart requested: pods are replaced one by one.</span>}
          {restart.error && <ErrorState error={restart.error} />}
        </form>
      )}
      {confirmRestart && (
        <Confirm
          title={`Restart ${name}?`}
          confirm="Restart pods"
          onCancel={() => setConfirmRestart(false)}
          onConfirm={() => {
            setConfirmRestart(false);
            restart.mutate();
          }}
        >
          <p>Every pod is replaced, following the rollout rules; the spec does not change.</p>
        </Confirm>
      )}
    </section>
  );
}

/** A count of pods to scale to, with the API's refusal under it. */
function CountField({
  id,
  label,
  value,
  onChange,
  error,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (value: string) => void;
  error: string | undefined;
}) {
  return (
    <div className={`field${error ? ' field-invalid' : ''}`}>
      <label htmlFor={id}>{label}</label>
      <input
        id={id}
        type="number"
        min={0}
        value={value}
        onChange={(e) => onChange(e.target.value)}
        aria-invalid={error ? true : undefined}
        aria-describedby={error ? `${id}-error` : undefined}
      />
      {error && (
        <p className="field-error" id={`${id}-error`} role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

type Role = 'prefill' | 'decode';
const ROLES: { role: Role; label: string; what: string }[] = [
  { role: 'prefill', label: 'Prefill', what: 'compute the prompt' },
  { role: 'decode', label: 'Decode', what: 'generate the tokens' },
];

/** A disaggregated deployment's roles: each one's pods, its cause, and its own scale. */
export function Roles({ deployment, editable }: { deployment: Deployment; editable: boolean }) {
  return (
    <div className="roles">
      <h3>Prefill and decode</h3>
      <ul className="plain-list">
        {ROLES.map(({ role, label, what }) => (
          <RoleRow key={role} deployment={deployment} role={role} label={label} what={what} editable={editable} />
        ))}
      </ul>
    </div>
  );
}

function RoleRow({
  deployment,
  role,
  label,
  what,
  editable,
}: {
  deployment: Deployment;
  role: Role;
  label: string;
  what: string;
  editable: boolean;
}) {
  const { project, name } = deployment;
  const status = deployment.status.roles?.find((s) => s.role === role);
  const wanted = deployment.spec.disaggregation?.[role]?.replicas ?? 1;
  const [replicas, setReplicas] = useState(String(wanted));
  const scale = useMutation({
    mutationFn: (n: number) =>
      call(
        api.POST('/api/v1/projects/{project}/deployments/{name}/scale', {
          params: { path: { project, name } },
          body: { replicas: n, role },
        }),
      ),
  });
  const error =
    scale.error instanceof ApiError
      ? (scale.error.fields.replicas ?? scale.error.fields.role ?? scale.error.message)
      : scale.error?.message;
  const id = `scale-${role}`;
  return (
    <li data-testid={`role-${role}`}>
      <p>
        <strong>{label}</strong> <span className="muted">({what})</span>:{' '}
        {status ? (
          <>
            <ReplicaBar replicas={status.replicas} /> ready of {status.replicas.desired}
          </>
        ) : (
          <>{wanted} wanted, not reported yet</>
        )}
        {status?.message && <span className="muted"> · {status.message}</span>}
      </p>
      {editable && (
        <form
          className="inline-form"
          onSubmit={(e: FormEvent) => {
            e.preventDefault();
            scale.mutate(Number(replicas));
          }}
        >
          <CountField id={id} label={`${label} replicas`} value={replicas} onChange={setReplicas} error={error} />
          <button type="submit" className="btn btn-primary" disabled={scale.isPending}>
            Scale {label.toLowerCase()}
          </button>
        </form>
      )}
    </li>
  );
}

export function Endpoints({ deployment }: { deployment: Deployment }) {
  const e = deployment.status.endpoints;
  const model = deployment.spec.model.servedName ?? deployment.name;
  const keys = deployment.spec.access === 'keys';
  const curl = e.openaiBase
    ? [
        `curl ${e.openaiBase}/chat/completions \\`,
        ...(keys ? [`  -H "Authorization: Bearer $MODEL_KEY" \\`] : []),
        `  -H 'Content-Type: application/json' \\`,
        `  -d '${JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello!' }] })}'`,
      ].join('\n')
    : null;
  const row = (label: string, url: string | null | undefined) =>
    url ? (
      <tr key={label + url}>
        <th scope="row">{label}</th>
        <td>
          <code>{url}</code>
        </td>
        <td>
          <CopyButton text={url} label="Copy URL" />
        </td>
      </tr>
    ) : null;
  return (
    <section className="card" aria-labelledby="endpoints-title">
      <h2 id="endpoints-title">Endpoints</h2>
      {e.reason && <p className="notice notice-warn">{e.reason}</p>}
      {(e.external.length > 0 || e.cluster) && (
        <table className="endpoints">
          <tbody>
            {e.external.map((url) => row('External', url))}
            {row('In the cluster', e.cluster)}
            {row('OpenAI base URL', e.openaiBase)}
          </tbody>
        </table>
      )}
      {e.openaiBase && (
        <p data-testid="access">
          {keys
            ? `Callers need a model key of ${deployment.project} (Tokens & access → Model keys), sent as Authorization: Bearer or x-api-key.`
            : 'Anyone who reaches the Gateway may call it (spec.access: public).'}
        </p>
      )}
      {curl && (
        <>
          <h3>Call it</h3>
          <pre>{curl}</pre>
          <CopyButton text={curl} label="Copy curl" />
        </>
      )}
    </section>
  );
}

interface OwnedObject {
  kind: string;
  namespace: string;
  name: string;
}

export function KubernetesObjects({ deployment }: { deployment: Deployment }) {
  const { project, name } = deployment;
  const objects = useQuery({
    queryKey: ['objects', project, name, deployment.generation],
    queryFn: () =>
      graphql<{ deployment: { objects: OwnedObject[] } | null }>(
        'query Objects($project: String!, $name: String!) { deployment(project: $project, name: $name) { objects { kind namespace name } } }',
        { project, name },
      ),
  });
  return (
    <section className="card" aria-labelledby="objects-title">
      <h2 id="objects-title">Kubernetes objects</h2>
      {objects.error ? (
        <ErrorState error={objects.error} />
      ) : !objects.data ? (
        <p className="muted">Loading…</p>
      ) : (
        <>
          <p className="hint">
            Kept by modelplane with server-side apply (field manager <code>modelplane</code>); changes made to them by hand
            are put back.
          </p>
          <ul className="objects">
            {(objects.data.deployment?.objects ?? []).map((o) => (
              <li key={`${o.kind}/${o.namespace}/${o.name}`}>
                <code>
                  {o.kind} {o.namespace}/{o.name}
                </code>
              </li>
            ))}
          </ul>
          {objects.data.deployment?.objects.some((o) => o.kind === 'Deployment') && (
            <p className="hint">
              <code>
                kubectl -n {objects.data.deployment.objects.find((o) => o.kind === 'Deployment')?.namespace} describe
                deployment {name}
              </code>
            </p>
          )}
        </>
      )}
    </section>
  );
}

const METRIC_WORDS: Record<string, string> = {
  waitingPerReplica: 'queued requests per replica',
  runningPerReplica: 'running requests per replica',
  kvCacheUsage: 'KV-cache use',
  requestsPerSecondPerReplica: 'requests/s per replica',
};

const LIMIT_WORDS: Record<string, string> = {
  minReplicas: 'the minimum',
  maxReplicas: 'the maximum',
  quota: 'the project’s quota',
  capacity: 'the free GPUs',
  scaleUpStabilization: 'the scale-up stabilization window',
  scaleDownDelay: 'the scale-down delay',
  staleMetrics: 'missing or stale metrics (the count is held)',
  notServing: 'the deployment not serving',
};

/** The autoscaling range, and the autoscaler's last decision in its own words. */
function Autoscaling({ deployment }: { deployment: Deployment }) {
  const spec = deployment.spec.autoscaling!;
  const state = deployment.status.autoscaling;
  const target =
    spec.target.metric === 'kvCacheUsage' ? `${Math.round(spec.target.value * 100)}%` : String(spec.target.value);
  return (
    <div className="autoscaling" data-testid="autoscaling">
      <p>
        <strong>Autoscaled</strong> between {spec.minReplicas} and {spec.maxReplicas} replicas, keeping{' '}
        {METRIC_WORDS[spec.target.metric] ?? spec.target.metric} at {target}; scaling by hand is off while it is on (edit the
        spec to change the range).
        {spec.minReplicas === 0 && (
          <>
            {' '}
            After {spec.scaleToZeroAfterSeconds ?? 900} s without a request it goes to zero replicas; the first request then
            waits up to {spec.activationTimeoutSeconds ?? 600} s while a replica starts.
          </>
        )}
      </p>
      {state ? (
        <dl className="figures">
          <div className="figure">
            <dt>Set to</dt>
            <dd className="num">{state.replicas}</dd>
          </div>
          <div className="figure">
            <dt>The load asks for</dt>
            <dd className="num">{state.wanted}</dd>
          </div>
          <div className="figure">
            <dt>Limited by</dt>
            <dd>{state.limitedBy ? (LIMIT_WORDS[state.limitedBy] ?? state.limitedBy) : 'nothing'}</dd>
          </div>
          <div className="figure figure-wide">
            <dt>Last decision</dt>
            <dd>
              {state.reason} <span className="muted">({when(state.decidedAt)})</span>
            </dd>
          </div>
          {state.lastScaled && (
            <div className="figure figure-wide">
              <dt>Last change</dt>
              <dd>
                {state.lastScaled.from} → {state.lastScaled.to} at {when(state.lastScaled.at)}: {state.lastScaled.reason}
              </dd>
            </div>
          )}
        </dl>
      ) : (
        <p className="muted">No decision yet: the autoscaler decides after each reading of the serving metrics.</p>
      )}
    </div>
  );
}

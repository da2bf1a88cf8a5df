import { useRef, useState, type FormEvent, type ReactNode } from 'react';
import { Link, useNavigate, useParams } from 'react-router';
import { useQueryClient } from '@tanstack/react-query';
import { api, ApiError, call } from '../api/client';
import { keys, type DeploymentWithWarnings } from '../api/capacity';
import { useRole } from '../auth/AuthProvider';
import { can } from '../auth/roles';
import { Field } from '../components/Field';
import { FreeGpus, fitWarning, gpuFit, gpusPerReplica, products, useCapacity } from '../components/FreeGpus';
import { Empty } from '../components/States';
import { useTitle } from '../components/Title';
import { ADVANCED, applyPreset, buildBody, curlFor, EMPTY, fieldFor, PRESETS, SCALE_METRICS, type FormState } from './create/form';

type Errors = Partial<Record<keyof FormState, string>>;

/** The create form: engine presets, every common field, advanced ones folded away. */
export function CreateDeployment() {
  const { project = '' } = useParams();
  useTitle(`Create deployment · ${project}`);
  const role = useRole(project);
  const navigate = useNavigate();
  const client = useQueryClient();
  const [state, setState] = useState<FormState>(() => applyPreset(EMPTY, PRESETS[3]!));
  const [errors, setErrors] = useState<Errors>({});
  const [unmatched, setUnmatched] = useState<{ field: string; message: string }[]>([]);
  const [failure, setFailure] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [advancedOpen, setAdvancedOpen] = useState(false);
  const summary = useRef<HTMLDivElement>(null);
  const list = `/projects/${encodeURIComponent(project)}/deployments`;
  const editor = can.edit(role);
  const capacity = useCapacity(editor);

  if (!editor) {
    return (
      <Empty title={`You need the editor role on ${project} to create deployments`}>
        <p>
          Ask an admin of {project} for an editor token, or go <Link to={list}>back to the deployments</Link>.
        </p>
      </Empty>
    );
  }

  const set = (key: keyof FormState) => (value: string) => setState((s) => ({ ...s, [key]: value }));
  const body = buildBody(state);
  const perReplica = gpusPerReplica(state.gpuCount);
  const fit = gpuFit(capacity.data, perReplica, state.gpuProduct.trim() || null);
  const fitText = fitWarning(fit, perReplica);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setErrors({});
    setUnmatched([]);
    setFailure(null);
    try {
      const created: DeploymentWithWarnings = await call(
        api.POST('/api/v1/projects/{project}/deployments', { params: { path: { project } }, body }),
      );
      client.setQueryData(['deployment', project, created.name], created);
      void client.invalidateQueries({ queryKey: keys.quota(project) });
      void client.invalidateQueries({ queryKey: keys.capacity });
      // The deployment page shows what the server warned about (e.g. not every replica fits now).
      navigate(`${list}/${encodeURIComponent(created.name)}`, { state: { warnings: created.warnings ?? [] } });
    } catch (err) {
      if (err instanceof ApiError && err.problem.errors?.length) {
        const next: Errors = {};
        const rest: { field: string; message: string }[] = [];
        for (const { field, message } of err.problem.errors) {
          const key = fieldFor(field);
          if (key) next[key] = next[key] ? `${next[key]}; ${message}` : message;
          else rest.push({ field, message });
        }
        setErrors(next);
        setUnmatched(rest);
        if (ADVANCED.some((k) => next[k])) setAdvancedOpen(true);
        setFailure(`${err.problem.errors.length === 1 ? 'One field needs' : `${err.problem.errors.length} fields need`} attention.`);
      } else {
        setFailure(err instanceof Error ? err.message : String(err));
      }
      requestAnimationFrame(() => summary.current?.focus());
    } finally {
      setBusy(false);
    }
  };

  const text = (
    key: keyof FormState,
    label: string,
    hint: ReactNode,
    { warning, ...props }: { placeholder?: string; inputMode?: 'numeric'; list?: string; warning?: ReactNode } = {},
  ) => (
    <Field label={label} hint={hint} warning={warning} error={errors[key]}>
      {(a) => <input {...a} {...props} name={key} value={state[key]} onChange={(e) => set(key)(e.target.value)} />}
    </Field>
  );
  const area = (key: keyof FormState, label: string, hint: ReactNode, placeholder?: string) => (
    <Field label={label} hint={hint} error={errors[key]}>
      {(a) => (
        <textarea {...a} name={key} rows={3} placeholder={placeholder} value={state[key]} onChange={(e) => set(key)(e.target.value)} />
      )}
    </Field>
  );

  return (
    <>
      <div className="page-head">
        <h1>Create deployment</h1>
        <div className="actions">
          <Link className="btn" to={list}>
            Cancel
          </Link>
        </div>
      </div>
      <form onSubmit={submit} noValidate aria-describedby="create-summary">
        <div id="create-summary" ref={summary} tabIndex={-1}>
          {failure && (
            <div className="state state-error" role="alert">
              <p>
                <strong>The deployment was not created.</strong> {failure}
              </p>
              {unmatched.length > 0 && (
                <ul>
                  {unmatched.map((u) => (
                    <li key={u.field}>
                      <code>{u.field}</code>: {u.message}
                    </li>
                  ))}
                </ul>
              )}
            </div>
          )}
        </div>

        <fieldset>
          <legend>Engine</legend>
          <div className="presets" role="group" aria-label="Engine presets">
            {PRESETS.map((p) => (
              <button
                key={p.engine}
                type="button"
                className={`preset${state.engine === p.engine ? ' preset-on' : ''}`}
                aria-pressed={state.engine === p.engine}
                onClick={() => setState((s) => applyPreset(s, p))}
              >
                <strong>{p.label}</strong>
                <span className="muted">{p.description}</span>
              </button>
            ))}
          </div>
          {errors.engine && (
            <p className="field-error" role="alert">
              {errors.engine}
            </p>
          )}
          {text('image', 'Image', 'Container image; leave empty for the server’s default image for this engine.', {
            placeholder: 'vllm/vllm-openai:v0.11.0',
          })}
        </fieldset>

        <fieldset>
          <legend>Model</legend>
          {text('name', 'Name', 'Lowercase letters, digits and dashes, starting with a letter (at most 45). Unique in the project.', {
            placeholder: 'qwen-chat',
          })}
          {text(
            'source',
            'Model source',
            <>
              Where the weights come from: <code>hf://org/name</code> (Hugging Face, downloaded by the engine),{' '}
              <code>pvc://claim/path</code> (a volume in the project’s namespace), <code>oci://registry/repo:tag</code>{' '}
              (an image volume) or <code>s3://bucket/key</code> (copied in at start).
            </>,
            { placeholder: 'hf://Qwen/Qwen2.5-0.5B-Instruct' },
          )}
          {text('servedName', 'Served model name', <>The OpenAI <code>model</code> id clients send; defaults to the deployment’s name.</>)}
        </fieldset>

        <fieldset>
          <legend>Resources</legend>
          <div className="field-row">
            {text('gpuCount', 'GPUs', 'GPUs per replica; empty for none (the simulator needs none).', {
              inputMode: 'numeric',
              warning: fitText && (
                <span data-testid="gpu-fit-warning" data-fit={fit.kind}>
                  {fitText}
                </span>
              ),
            })}
            {text('gpuProduct', 'GPU product', 'Schedules onto nodes with this GPU, e.g. NVIDIA-L4.', { list: 'gpu-products' })}
          </div>
          <datalist id="gpu-products">
            {products(capacity.data).map((p) => (
              <option key={p} value={p} />
            ))}
          </datalist>
          <FreeGpus capacity={capacity} />
          <div className="field-row">
            {text('cpu', 'CPU', 'Per replica, e.g. 4 or 500m.')}
            {text('memory', 'Memory', 'Per replica, e.g. 16Gi.')}
            {text('sharedMemory', 'Shared memory', 'Size of /dev/shm, e.g. 2Gi (tensor parallelism needs it).')}
          </div>
          <div className="field-row">
            {text('tensorParallel', 'Tensor parallel', 'GPUs one model layer is split over (vLLM --tensor-parallel-size).', { inputMode: 'numeric' })}
            {text('pipelineParallel', 'Pipeline parallel', 'Stages the layers are split into (--pipeline-parallel-size).', { inputMode: 'numeric' })}
            {text(
              'nodesPerReplica',
              'Nodes per replica',
              'For a model larger than one node: each replica runs as a group of this many pods (a LeaderWorkerSet), sharing tensor × pipeline parallel GPUs.',
              { inputMode: 'numeric' },
            )}
          </div>
          {state.disaggregate !== 'on' &&
            text(
              'replicas',
              'Replicas',
              state.autoscale === 'on'
                ? 'Where the autoscaler starts; between the minimum and the maximum.'
                : 'How many copies serve; 0 keeps the deployment but stops every pod.',
              { inputMode: 'numeric' },
            )}
          <div className={`field field-check${errors.disaggregate ? ' field-invalid' : ''}`}>
            <label>
              <input
                type="checkbox"
                name="disaggregate"
                checked={state.disaggregate === 'on'}
                onChange={(e) => set('disaggregate')(e.target.checked ? 'on' : '')}
              />{' '}
              Prefill/decode disaggregation: long prompts are computed by prefill pods, tokens generated by decode pods (routes
              through an InferencePool; set at creation)
            </label>
            {errors.disaggregate && (
              <p className="field-error" role="alert">
                {errors.disaggregate}
              </p>
            )}
          </div>
          {state.disaggregate === 'on' && (
            <div className="field-row">
              {text('prefillReplicas', 'Prefill replicas', 'Pods that compute prompts and hand their KV cache on.', { inputMode: 'numeric' })}
              {text('decodeReplicas', 'Decode replicas', 'Pods that take every request and generate its tokens.', { inputMode: 'numeric' })}
            </div>
          )}
        </fieldset>

        <fieldset>
          <legend>Autoscaling</legend>
          <div className={`field field-check${errors.autoscale ? ' field-invalid' : ''}`}>
            <label>
              <input
                type="checkbox"
                name="autoscale"
                checked={state.autoscale === 'on'}
                onChange={(e) => set('autoscale')(e.target.checked ? 'on' : '')}
              />{' '}
              Follow the load: replicas between a minimum and a maximum, within the project’s quota and the free GPUs
            </label>
            {errors.autoscale && (
              <p className="field-error" role="alert">
                {errors.autoscale}
              </p>
            )}
          </div>
          {state.autoscale === 'on' && (
            <>
              <div className="field-row">
                {text(
                  'minReplicas',
                  'Minimum replicas',
                  'The fewest that serve; 0 frees every GPU when idle (the first request then waits while a replica starts).',
                  { inputMode: 'numeric' },
                )}
                {text('maxReplicas', 'Maximum replicas', 'The most it may scale to.', { inputMode: 'numeric' })}
              </div>
              <div className="field-row">
                <Field label="Scale on" hint="The figure each replica is kept at, from the model servers’ own metrics." error={errors.scaleMetric}>
                  {(a) => (
                    <select {...a} name="scaleMetric" value={state.scaleMetric} onChange={(e) => set('scaleMetric')(e.target.value)}>
                      {SCALE_METRICS.map((m) => (
                        <option key={m.metric} value={m.metric}>
                          {m.label}
                        </option>
                      ))}
                    </select>
                  )}
                </Field>
                {text(
                  'scaleTarget',
                  'Target per replica',
                  `In ${SCALE_METRICS.find((m) => m.metric === state.scaleMetric)?.unit ?? 'the metric’s unit'}.`,
                )}
                {text('scaleDownDelay', 'Scale-down delay (seconds)', 'How long a lower load must last before replicas are removed; default 300.', {
                  inputMode: 'numeric',
                })}
              </div>
              {state.minReplicas.trim() === '0' && (
                <div className="field-row">
                  {text('scaleToZeroAfter', 'Scale to zero after (seconds)', 'Without a request for this long, it goes to zero replicas; default 900.', {
                    inputMode: 'numeric',
                  })}
                  {text(
                    'activationTimeout',
                    'First request waits up to (seconds)',
                    'How long a request may wait at zero for a replica to start (large models take minutes); default 600.',
                    { inputMode: 'numeric' },
                  )}
                </div>
              )}
            </>
          )}
        </fieldset>

        <fieldset>
          <legend>Routing</legend>
          <div className="field-row">
            {text('gateway', 'Gateway', 'namespace/name[/section]; empty uses the server’s default Gateway.')}
            {text('hostname', 'Hostname', 'Matched by the route, e.g. qwen.models.example.com.')}
            {text('pathPrefix', 'Path prefix', `Under /${project}/ on a shared Gateway; rewritten to / for the engine.`)}
            <Field label="Who may call it" hint="Through the Gateway URL. Model keys are made under Tokens & access." error={errors.access}>
              {(a) => (
                <select {...a} name="access" value={state.access} onChange={(e) => set('access')(e.target.value)}>
                  <option value="">Server default (model keys where they are checked)</option>
                  <option value="keys">Callers with a model key of this project</option>
                  <option value="public">Anyone who reaches the Gateway</option>
                </select>
              )}
            </Field>
          </div>
          {area('labels', 'Labels', 'One key=value per line; put on the Kubernetes objects and used by the list’s filter.', 'team=nlp')}
        </fieldset>

        <details className="card" open={advancedOpen} onToggle={(e) => setAdvancedOpen((e.target as HTMLDetailsElement).open)}>
          <summary>Advanced: arguments, environment, probes, scheduling</summary>
          {area('args', 'Arguments', 'Extra engine arguments, one per line.', '--max-num-seqs=64')}
          {area('env', 'Environment', 'NAME=value per line. Credentials belong in a Secret, not here.', 'VLLM_LOGGING_LEVEL=INFO')}
          <div className="field-row">
            {text('startupTimeout', 'Startup timeout (seconds)', 'How long the model may take to load before the pod is restarted.', {
              inputMode: 'numeric',
            })}
            {text('healthPath', 'Health path', 'The engine’s health endpoint, e.g. /health.')}
          </div>
          {area('nodeSelector', 'Node selector', 'key=value per line; pods run only on matching nodes.', 'pool=gpu')}
          {area('tolerations', 'Tolerations', 'key=value:Effect or key:Effect per line (or a JSON array).', 'nvidia.com/gpu:NoSchedule')}
        </details>

        <details className="card">
          <summary>Show as curl</summary>
          <p className="hint">The exact request this form sends; set TOKEN to your API token.</p>
          <pre>{curlFor(window.location.origin, project, body)}</pre>
        </details>

        <div className="actions-row">
          <button type="submit" className="btn btn-primary" disabled={busy}>
            {busy ? 'Creating…' : 'Create'}
          </button>
          <Link className="btn" to={list}>
            Cancel
          </Link>
        </div>
      </form>
    </>
  );
}

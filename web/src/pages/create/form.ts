// The create form's state and the one function that turns it into the request body, used
// both to submit and to show the request as curl (so the two cannot differ).
import type { DeploymentSpec, Schemas } from '../../api/client';

export type EngineKind = Schemas['EngineKind'];

export interface FormState {
  name: string;
  engine: EngineKind;
  source: string;
  servedName: string;
  image: string;
  gpuCount: string;
  gpuProduct: string;
  cpu: string;
  memory: string;
  sharedMemory: string;
  replicas: string;
  /** A model larger than one node: its parallel layout and the nodes each replica spans. */
  tensorParallel: string;
  pipelineParallel: string;
  nodesPerReplica: string;
  /** `on` for prefill/decode disaggregation: two roles behind an InferencePool. */
  disaggregate: string;
  prefillReplicas: string;
  decodeReplicas: string;
  /** `on` when the replicas follow the load. */
  autoscale: string;
  minReplicas: string;
  maxReplicas: string;
  scaleMetric: string;
  scaleTarget: string;
  scaleDownDelay: string;
  /** With a minimum of 0: idle seconds before going to zero, and how long a request may wait. */
  scaleToZeroAfter: string;
  activationTimeout: string;
  gateway: string;
  hostname: string;
  pathPrefix: string;
  /** `keys`, `public`, or empty for the server's default (keys where it checks them). */
  access: string;
  labels: string;
  args: string;
  env: string;
  startupTimeout: string;
  healthPath: string;
  nodeSelector: string;
  tolerations: string;
}

export const EMPTY: FormState = {
  name: '',
  engine: 'sim',
  source: '',
  servedName: '',
  image: '',
  gpuCount: '',
  gpuProduct: '',
  cpu: '',
  memory: '',
  sharedMemory: '',
  replicas: '1',
  tensorParallel: '',
  pipelineParallel: '',
  nodesPerReplica: '',
  disaggregate: '',
  prefillReplicas: '1',
  decodeReplicas: '1',
  autoscale: '',
  minReplicas: '1',
  maxReplicas: '4',
  scaleMetric: 'waitingPerReplica',
  scaleTarget: '4',
  scaleDownDelay: '',
  scaleToZeroAfter: '',
  activationTimeout: '',
  gateway: '',
  hostname: '',
  pathPrefix: '',
  access: '',
  labels: '',
  args: '',
  env: '',
  startupTimeout: '',
  healthPath: '',
  nodeSelector: '',
  tolerations: '',
};

export interface Preset {
  engine: EngineKind;
  label: string;
  description: string;
  values: Partial<FormState>;
}

/** Sensible starting points; the image stays empty so the server's default for the engine is used. */
export const PRESETS: Preset[] = [
  {
    engine: 'vllm',
    label: 'vLLM',
    description: 'High-throughput serving on one GPU; prefix caching on.',
    values: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct', gpuCount: '1', cpu: '4', memory: '16Gi', sharedMemory: '2Gi', args: '--enable-prefix-caching' },
  },
  {
    engine: 'sglang',
    label: 'SGLang',
    description: 'Fast structured generation on one GPU.',
    values: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct', gpuCount: '1', cpu: '4', memory: '16Gi', sharedMemory: '2Gi', args: '' },
  },
  {
    engine: 'tgi',
    label: 'TGI',
    description: 'Hugging Face Text Generation Inference on one GPU.',
    values: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct', gpuCount: '1', cpu: '4', memory: '16Gi', sharedMemory: '1Gi', args: '' },
  },
  {
    engine: 'sim',
    label: 'Simulator',
    description: 'The llm-d inference simulator: no GPU, answers at once. For trying things out.',
    values: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct', gpuCount: '', gpuProduct: '', cpu: '', memory: '', sharedMemory: '', args: '' },
  },
];

export function applyPreset(state: FormState, preset: Preset): FormState {
  return { ...state, ...preset.values, engine: preset.engine };
}

function lines(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
}

/** `key=value` lines into a map (a line without `=` maps to an empty value; the API judges it). */
function pairs(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of lines(text)) {
    const at = line.indexOf('=');
    if (at < 0) out[line] = '';
    else out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

/** A number field: sent as a number when it is one, else as typed, so the API names the problem. */
function numberOrText(value: string): number | string | undefined {
  const v = value.trim();
  if (!v) return undefined;
  return /^-?\d+$/.test(v) ? Number(v) : v;
}

/** A decimal field (a target such as 0.8), the same way. */
function decimalOrText(value: string): number | string | undefined {
  const v = value.trim();
  if (!v) return undefined;
  return /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
}

/** What the autoscaler can keep each replica at, with what the target's number means. */
export const SCALE_METRICS: { metric: string; label: string; unit: string }[] = [
  { metric: 'waitingPerReplica', label: 'Queued requests per replica', unit: 'requests waiting' },
  { metric: 'runningPerReplica', label: 'Running requests per replica', unit: 'requests running' },
  { metric: 'kvCacheUsage', label: 'KV-cache use', unit: 'fraction, 0 to 1' },
  { metric: 'requestsPerSecondPerReplica', label: 'Requests/s per replica', unit: 'requests per second' },
];

function text(value: string): string | undefined {
  const v = value.trim();
  return v ? v : undefined;
}

/** Drops `undefined` members and objects left empty, so the body holds only what was filled. */
function prune<T>(value: T): T | undefined {
  if (Array.isArray(value)) return (value.length ? value : undefined) as T | undefined;
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const p = prune(v);
      if (p !== undefined) out[k] = p;
    }
    return (Object.keys(out).length ? out : undefined) as T | undefined;
  }
  return value;
}

export interface Body {
  name: string;
  spec: DeploymentSpec;
}

/** Tolerations: a JSON array, or `key=value:Effect` / `key:Effect` / `key` lines. */
function tolerations(input: string): unknown {
  const t = input.trim();
  if (!t) return undefined;
  if (t.startsWith('[')) {
    try {
      return JSON.parse(t);
    } catch {
      return t; // the API reports it under spec.scheduling.tolerations
    }
  }
  return lines(t).map((line) => {
    const [kv = '', effect] = line.split(':');
    const [key = '', value] = kv.split('=');
    return value === undefined
      ? { key: key.trim(), operator: 'Exists', effect: effect?.trim() || undefined }
      : { key: key.trim(), operator: 'Equal', value: value.trim(), effect: effect?.trim() || undefined };
  });
}

export function buildBody(s: FormState): Body {
  const env = Object.entries(pairs(s.env)).map(([name, value]) => ({ name, value }));
  const gpu = s.engine === 'sim' && !s.gpuCount.trim() ? undefined : { count: numberOrText(s.gpuCount), product: text(s.gpuProduct) };
  const spec = prune({
    model: { source: s.source.trim(), servedName: text(s.servedName) },
    engine: {
      kind: s.engine,
      image: text(s.image),
      args: lines(s.args),
      env,
      tensorParallelSize: numberOrText(s.tensorParallel),
      pipelineParallelSize: numberOrText(s.pipelineParallel),
    },
    // Above 1: each replica is a LeaderWorkerSet group of this many pods (one per node).
    nodesPerReplica: numberOrText(s.nodesPerReplica),
    // With roles, the roles' counts are the deployment's (the server keeps their sum).
    replicas: s.disaggregate === 'on' ? undefined : numberOrText(s.replicas),
    disaggregation:
      s.disaggregate === 'on'
        ? { prefill: { replicas: numberOrText(s.prefillReplicas) }, decode: { replicas: numberOrText(s.decodeReplicas) } }
        : undefined,
    autoscaling:
      s.autoscale === 'on'
        ? {
            minReplicas: numberOrText(s.minReplicas),
            maxReplicas: numberOrText(s.maxReplicas),
            target: { metric: s.scaleMetric, value: decimalOrText(s.scaleTarget) },
            scaleDownDelaySeconds: numberOrText(s.scaleDownDelay),
            // Only a minimum of zero takes these (the API says so otherwise).
            scaleToZeroAfterSeconds: s.minReplicas.trim() === '0' ? numberOrText(s.scaleToZeroAfter) : undefined,
            activationTimeoutSeconds: s.minReplicas.trim() === '0' ? numberOrText(s.activationTimeout) : undefined,
          }
        : undefined,
    resources: { cpu: text(s.cpu), memory: text(s.memory), sharedMemory: text(s.sharedMemory), gpu },
    routing: {
      gateway: text(s.gateway),
      hostname: text(s.hostname),
      pathPrefix: text(s.pathPrefix),
      // The endpoint picker of an InferencePool sends each request to a prefill and a decode pod.
      mode: s.disaggregate === 'on' ? 'InferencePool' : undefined,
    },
    access: text(s.access),
    labels: pairs(s.labels),
    probes: { startupTimeoutSeconds: numberOrText(s.startupTimeout), healthPath: text(s.healthPath) },
    scheduling: { nodeSelector: pairs(s.nodeSelector), tolerations: tolerations(s.tolerations) },
  }) as DeploymentSpec | undefined;
  // `model.source` is required: keep it even when empty so the API says so next to the field.
  return { name: s.name.trim(), spec: { ...(spec ?? {}), model: { source: s.source.trim(), ...(spec?.model ?? {}) } } as DeploymentSpec };
}

/** The exact request, as curl, with a placeholder for the token. */
export function curlFor(origin: string, project: string, body: Body): string {
  const json = JSON.stringify(body, null, 2).replace(/'/g, `'\\''`);
  return [
    `curl -X POST ${origin}/api/v1/projects/${encodeURIComponent(project)}/deployments \\`,
    `  -H "Authorization: Bearer $TOKEN" \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d '${json}'`,
  ].join('\n');
}

/** Which form field shows an API error for a dotted path (`spec.engine.args[2]` → `args`). */
export function fieldFor(path: string): keyof FormState | null {
  const p = path.replace(/\[\d+\]/g, '');
  const table: [string, keyof FormState][] = [
    ['name', 'name'],
    ['spec.model.source', 'source'],
    ['spec.model.servedName', 'servedName'],
    ['spec.model', 'source'],
    ['spec.engine.kind', 'engine'],
    ['spec.engine.image', 'image'],
    ['spec.engine.args', 'args'],
    ['spec.engine.env', 'env'],
    ['spec.engine.tensorParallelSize', 'tensorParallel'],
    ['spec.engine.pipelineParallelSize', 'pipelineParallel'],
    ['spec.nodesPerReplica', 'nodesPerReplica'],
    ['spec.resources.gpu.count', 'gpuCount'],
    ['spec.resources.gpu.product', 'gpuProduct'],
    ['spec.resources.gpu', 'gpuCount'],
    ['spec.resources.cpu', 'cpu'],
    ['spec.resources.memory', 'memory'],
    ['spec.resources.sharedMemory', 'sharedMemory'],
    ['spec.replicas', 'replicas'],
    ['spec.disaggregation.prefill', 'prefillReplicas'],
    ['spec.disaggregation.decode', 'decodeReplicas'],
    ['spec.disaggregation', 'disaggregate'],
    ['spec.autoscaling.minReplicas', 'minReplicas'],
    ['spec.autoscaling.maxReplicas', 'maxReplicas'],
    ['spec.autoscaling.target.metric', 'scaleMetric'],
    ['spec.autoscaling.target', 'scaleTarget'],
    ['spec.autoscaling.scaleDownDelaySeconds', 'scaleDownDelay'],
    ['spec.autoscaling.scaleToZeroAfterSeconds', 'scaleToZeroAfter'],
    ['spec.autoscaling.activationTimeoutSeconds', 'activationTimeout'],
    ['spec.autoscaling', 'autoscale'],
    ['spec.routing.gateway', 'gateway'],
    ['spec.routing.hostname', 'hostname'],
    ['spec.routing.pathPrefix', 'pathPrefix'],
    ['spec.access', 'access'],
    ['spec.labels', 'labels'],
    ['spec.probes.startupTimeoutSeconds', 'startupTimeout'],
    ['spec.probes.healthPath', 'healthPath'],
    ['spec.scheduling.nodeSelector', 'nodeSelector'],
    ['spec.scheduling.tolerations', 'tolerations'],
  ];
  for (const [prefix, field] of table) if (p === prefix || p.startsWith(`${prefix}.`)) return field;
  return null;
}

/** Where each field lives in the form, so an error can open the folded section. */
export const ADVANCED: (keyof FormState)[] = ['args', 'env', 'startupTimeout', 'healthPath', 'nodeSelector', 'tolerations'];

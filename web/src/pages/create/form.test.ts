import { describe, expect, it } from 'vitest';
import { applyPreset, buildBody, curlFor, EMPTY, fieldFor, PRESETS } from './form';

const preset = (engine: string) => PRESETS.find((p) => p.engine === engine)!;

describe('buildBody', () => {
  it('sends only what was filled, with numbers as numbers', () => {
    const state = { ...applyPreset(EMPTY, preset('sim')), name: ' chat ', replicas: '2', labels: 'team=nlp\n\ntier = gold' };
    expect(buildBody(state)).toEqual({
      name: 'chat',
      spec: {
        model: { source: 'hf://Qwen/Qwen2.5-0.5B-Instruct' },
        engine: { kind: 'sim' },
        replicas: 2,
        labels: { team: 'nlp', tier: 'gold' },
      },
    });
  });

  it('fills a GPU engine from its preset and keeps what the API must judge as typed', () => {
    const state = { ...applyPreset(EMPTY, preset('vllm')), name: 'qwen', replicas: 'two', env: 'A=1', tolerations: 'nvidia.com/gpu:NoSchedule' };
    const body = buildBody(state);
    expect(body.spec.resources).toEqual({ cpu: '4', memory: '16Gi', sharedMemory: '2Gi', gpu: { count: 1 } });
    expect(body.spec.engine).toEqual({ kind: 'vllm', args: ['--enable-prefix-caching'], env: [{ name: 'A', value: '1' }] });
    expect(body.spec.replicas).toBe('two');
    expect(body.spec.scheduling?.tolerations).toEqual([{ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' }]);
  });

  it('sends access only when chosen, and maps its errors to its field', () => {
    const base = { ...EMPTY, name: 'q', source: 'hf://a/b' };
    expect(buildBody(base).spec.access).toBeUndefined();
    expect(buildBody({ ...base, access: 'public' }).spec.access).toBe('public');
    expect(fieldFor('spec.access')).toBe('access');
  });

  it('sends autoscaling only when it is on, targets as numbers, and maps its errors to its fields', () => {
    const off = { ...applyPreset(EMPTY, preset('sim')), name: 'chat' };
    expect(buildBody(off).spec.autoscaling).toBeUndefined();
    const on = { ...off, autoscale: 'on', minReplicas: '1', maxReplicas: '6', scaleMetric: 'kvCacheUsage', scaleTarget: '0.8' };
    expect(buildBody(on).spec.autoscaling).toEqual({ minReplicas: 1, maxReplicas: 6, target: { metric: 'kvCacheUsage', value: 0.8 } });
    expect(buildBody({ ...on, scaleTarget: 'lots', scaleDownDelay: '60' }).spec.autoscaling).toEqual({
      minReplicas: 1,
      maxReplicas: 6,
      target: { metric: 'kvCacheUsage', value: 'lots' },
      scaleDownDelaySeconds: 60,
    });
    expect(fieldFor('spec.autoscaling.maxReplicas')).toBe('maxReplicas');
    expect(fieldFor('spec.autoscaling.target.value')).toBe('scaleTarget');
    expect(fieldFor('spec.autoscaling.target.metric')).toBe('scaleMetric');
    expect(fieldFor('spec.autoscaling.scaleDownDelaySeconds')).toBe('scaleDownDelay');
    expect(fieldFor('spec.autoscaling.scaleToZeroAfterSeconds')).toBe('scaleToZeroAfter');
    expect(fieldFor('spec.autoscaling.activationTimeoutSeconds')).toBe('activationTimeout');
    // The idle time and the wait go only with a minimum of zero.
    const idle = { ...on, scaleToZeroAfter: '120', activationTimeout: '900' };
    expect(buildBody(idle).spec.autoscaling?.scaleToZeroAfterSeconds).toBeUndefined();
    expect(buildBody({ ...idle, minReplicas: '0' }).spec.autoscaling).toEqual({
      minReplicas: 0,
      maxReplicas: 6,
      target: { metric: 'kvCacheUsage', value: 0.8 },
      scaleToZeroAfterSeconds: 120,
      activationTimeoutSeconds: 900,
    });
  });

  it('sends disaggregation only when it is on, with the pool mode and the roles’ counts instead of replicas', () => {
    const off = { ...applyPreset(EMPTY, preset('sim')), name: 'big' };
    expect(buildBody(off).spec.disaggregation).toBeUndefined();
    expect(buildBody(off).spec.routing).toBeUndefined();
    const on = { ...off, disaggregate: 'on', prefillReplicas: '1', decodeReplicas: '3' };
    const spec = buildBody(on).spec;
    expect(spec.disaggregation).toEqual({ prefill: { replicas: 1 }, decode: { replicas: 3 } });
    expect(spec.routing).toEqual({ mode: 'InferencePool' });
    expect(spec.replicas).toBeUndefined();
    expect(fieldFor('spec.disaggregation.prefill.replicas')).toBe('prefillReplicas');
    expect(fieldFor('spec.disaggregation.decode.args[0]')).toBe('decodeReplicas');
    expect(fieldFor('spec.disaggregation')).toBe('disaggregate');
  });

  it('sends a model that spans nodes as its parallel layout and nodes per replica, and names their errors', () => {
    const one = { ...applyPreset(EMPTY, preset('vllm')), name: 'big' };
    expect(buildBody(one).spec.nodesPerReplica).toBeUndefined();
    const spec = buildBody({ ...one, tensorParallel: '8', pipelineParallel: '2', nodesPerReplica: '2', gpuCount: '' }).spec;
    expect(spec.nodesPerReplica).toBe(2);
    expect(spec.engine).toMatchObject({ tensorParallelSize: 8, pipelineParallelSize: 2 });
    expect(fieldFor('spec.nodesPerReplica')).toBe('nodesPerReplica');
    expect(fieldFor('spec.engine.tensorParallelSize')).toBe('tensorParallel');
    expect(fieldFor('spec.engine.pipelineParallelSize')).toBe('pipelineParallel');
  });

  it('keeps an empty model source so the API names it', () => {
    expect(buildBody({ ...EMPTY, name: 'x' }).spec.model).toEqual({ source: '' });
  });
});

describe('curlFor', () => {
  it('is the same body, with a placeholder for the token', () => {
    const body = buildBody({ ...applyPreset(EMPTY, preset('sim')), name: "it's" });
    const curl = curlFor('https://mp.example.com', 'team-a', body);
    expect(curl).toContain('curl -X POST https://mp.example.com/api/v1/projects/team-a/deployments');
    expect(curl).toContain('Authorization: Bearer $TOKEN');
    // Shell-quoted: the JSON between the quotes parses back to the body.
    const quoted = curl.slice(curl.indexOf("-d '") + 4, curl.lastIndexOf("'")).replace(/'\\''/g, "'");
    expect(JSON.parse(quoted)).toEqual(body);
  });
});

describe('fieldFor', () => {
  it('maps the API’s field paths onto the form', () => {
    expect(fieldFor('spec.model.source')).toBe('source');
    expect(fieldFor('spec.engine.args[2]')).toBe('args');
    expect(fieldFor('spec.resources.gpu.count')).toBe('gpuCount');
    expect(fieldFor('spec.scheduling.tolerations[0].effect')).toBe('tolerations');
    expect(fieldFor('name')).toBe('name');
    expect(fieldFor('spec.storage.cache.sizeLimit')).toBeNull();
  });
});

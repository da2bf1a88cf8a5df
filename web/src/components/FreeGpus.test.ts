import { describe, expect, it } from 'vitest';
import { fitWarning, gpuFit, gpusPerReplica } from './FreeGpus';

const gpu = (product: string | null, largestNode: number, largestFreeBlock: number) => ({
  resourceName: 'nvidia.com/gpu',
  product,
  nodes: 1,
  allocatable: largestNode,
  requested: largestNode - largestFreeBlock,
  requestedByModelplane: 0,
  free: largestFreeBlock,
  largestFreeBlock,
  largestNode,
  unavailableNodes: [],
});
const report = { observedAt: '2026-11-25T10:00:00Z', gpus: [gpu('NVIDIA-A100-SXM4-80GB', 8, 2), gpu('NVIDIA-L4', 4, 4)] };

describe('gpuFit', () => {
  it('judges one replica against the largest node, and the largest free block now', () => {
    expect(gpuFit(report, 4, null)).toEqual({ kind: 'fits' });
    expect(gpuFit(report, 4, 'NVIDIA-A100-SXM4-80GB')).toEqual({ kind: 'waits', largestFreeBlock: 2 });
    // The L4 node has 4 free, but 8 can only ever go on the A100 node, which has 2.
    expect(gpuFit(report, 8, null)).toEqual({ kind: 'waits', largestFreeBlock: 2 });
    expect(gpuFit(report, 9, null)).toEqual({ kind: 'never', largestNode: 8 });
    expect(gpuFit(report, 8, 'NVIDIA-L4')).toEqual({ kind: 'never', largestNode: 4 });
    expect(gpuFit(report, 1, 'NVIDIA-H100')).toEqual({ kind: 'no-product', product: 'NVIDIA-H100' });
    expect(gpuFit({ ...report, gpus: [] }, 1, null)).toEqual({ kind: 'never', largestNode: 0 });
  });

  it('judges nothing without a count or before the cluster was observed', () => {
    expect(gpuFit(report, null, null)).toEqual({ kind: 'unknown' });
    expect(gpuFit({ observedAt: null, gpus: [] }, 64, null)).toEqual({ kind: 'unknown' });
    expect(gpuFit(undefined, 64, null)).toEqual({ kind: 'unknown' });
    expect(fitWarning({ kind: 'fits' }, 1)).toBeUndefined();
  });

  it('reads GPUs per replica only as a positive whole number', () => {
    expect(gpusPerReplica(' 4 ')).toBe(4);
    expect(['', '0', '-1', '1.5', 'two'].map(gpusPerReplica)).toEqual([null, null, null, null, null]);
  });
});

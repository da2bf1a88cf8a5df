// The cluster's free GPUs beside the create form's GPU fields, and whether one replica can fit.
import { useQuery } from '@tanstack/react-query';
import { getCapacity, gpuLabel, keys, type CapacityReport } from '../api/capacity';

export function useCapacity(enabled = true) {
  return useQuery({ queryKey: keys.capacity, queryFn: getCapacity, enabled, staleTime: 30_000 });
}

/** Where one replica asking for `count` GPUs (of `product`, if named) stands against the cluster. */
export type Fit =
  | { kind: 'unknown' }
  | { kind: 'fits' }
  | { kind: 'waits'; largestFreeBlock: number }
  | { kind: 'never'; largestNode: number }
  | { kind: 'no-product'; product: string };

export function gpuFit(report: CapacityReport | undefined, count: number | null, product: string | null): Fit {
  // Nothing to judge: no GPUs asked for, or no worker has reported the cluster yet.
  if (!report?.observedAt || !count || count <= 0) return { kind: 'unknown' };
  // The form names no resource (the server picks its default), so match on the product only.
  const matching = report.gpus.filter((g) => !product || g.product === product);
  if (matching.length === 0) return product ? { kind: 'no-product', product } : { kind: 'never', largestNode: 0 };
  const largestNode = Math.max(...matching.map((g) => g.largestNode));
  if (count > largestNode) return { kind: 'never', largestNode };
  // Free room now counts only where such a replica could ever go.
  const largestFreeBlock = Math.max(...matching.filter((g) => g.largestNode >= count).map((g) => g.largestFreeBlock));
  if (count > largestFreeBlock) return { kind: 'waits', largestFreeBlock };
  return { kind: 'fits' };
}

/** The words for a fit worth warning about, or `undefined`. */
export function fitWarning(fit: Fit, count: number | null): string | undefined {
  switch (fit.kind) {
    case 'never':
      return fit.largestNode === 0
        ? `No node in the cluster has a GPU: a replica asking for ${count} will never fit, and the server will refuse it.`
        : `${count} GPUs per replica will never fit: the largest node has ${fit.largestNode}. The server will refuse it.`;
    case 'no-product':
      return `No node in the cluster offers ${fit.product}: a replica will never fit, and the server will refuse it.`;
    case 'waits':
      return `No node has ${count} GPUs free right now (largest free block ${fit.largestFreeBlock}): replicas will wait until some free up.`;
    default:
      return undefined;
  }
}

/** GPUs per replica as the form holds it: a positive whole number, else `null`. */
export function gpusPerReplica(text: string): number | null {
  const v = text.trim();
  return /^\d+$/.test(v) && Number(v) > 0 ? Number(v) : null;
}

/** Free GPUs by resource and product, or why they are not known. */
export function FreeGpus({ capacity }: { capacity: ReturnType<typeof useCapacity> }) {
  return (
    <section className="capacity" aria-label="Free GPUs" data-testid="gpu-capacity">
      <h3>Free GPUs in the cluster</h3>
      {capacity.isPending ? (
        <p className="muted">Reading the cluster’s GPU capacity…</p>
      ) : capacity.error ? (
        <p className="muted">The cluster’s GPU capacity could not be read ({capacity.error.message}).</p>
      ) : !capacity.data.observedAt ? (
        <p className="muted" data-testid="gpu-capacity-unknown">
          The cluster’s GPU capacity is not known yet: no worker has reported it.
        </p>
      ) : capacity.data.gpus.length === 0 ? (
        <p className="muted">No node in the cluster offers GPUs.</p>
      ) : (
        <>
          <ul className="capacity-list">
            {capacity.data.gpus.map((g) => (
              <li key={`${g.resourceName}/${g.product ?? ''}`} data-testid="gpu-capacity-entry">
                <span className="mono">{gpuLabel(g)}</span>: <strong>{g.free} free</strong> of {g.allocatable} (largest free block{' '}
                {g.largestFreeBlock})
                {g.unavailableNodes.length > 0 && (
                  <span className="muted">
                    {' '}
                    · not counted: {g.unavailableNodes.map((n) => `${n.name} (${n.reason})`).join(', ')}
                  </span>
                )}
              </li>
            ))}
          </ul>
          <p className="hint">
            As of <time dateTime={capacity.data.observedAt}>{new Date(capacity.data.observedAt).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' })}</time>. One replica’s GPUs must
            fit on one node.
          </p>
        </>
      )}
    </section>
  );
}

/** The GPU products the cluster reports, for the product field's suggestions. */
export function products(report: CapacityReport | undefined): string[] {
  return [...new Set((report?.gpus ?? []).map((g) => g.product).filter((p): p is string => !!p))].sort();
}

import type { Schemas } from '../api/client';

/** Ready replicas out of desired, as a bar with the numbers in words beside it. */
export function ReplicaBar({ replicas }: { replicas: Schemas['ReplicaCounts'] }) {
  const { ready, desired } = replicas;
  const pct = desired > 0 ? Math.min(100, Math.round((ready / desired) * 100)) : 0;
  return (
    <span className="replicas">
      <span
        className="replica-bar"
        role="meter"
        aria-valuemin={0}
        aria-valuemax={desired}
        aria-valuenow={ready}
        aria-label={`${ready} of ${desired} replicas ready`}
      >
        <span className="replica-fill" style={{ width: `${pct}%` }} />
      </span>
      <span className="replica-text" data-testid="replicas">
        {ready}/{desired}
      </span>
    </span>
  );
}

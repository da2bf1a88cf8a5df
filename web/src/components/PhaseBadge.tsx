import type { Phase } from '../api/client';

const TONE: Record<Phase, string> = {
  Pending: 'neutral',
  Deploying: 'info',
  Ready: 'ok',
  Degraded: 'warn',
  Failed: 'bad',
  ScaledToZero: 'neutral',
  Deleting: 'neutral',
};

const LABEL: Record<Phase, string> = { ScaledToZero: 'Scaled to zero' } as Record<Phase, string>;

/** The phase as a coloured badge that also says it in words (colour is never the only cue). */
export function PhaseBadge({ phase }: { phase: Phase }) {
  return (
    <span className={`badge badge-${TONE[phase] ?? 'neutral'}`} data-phase={phase}>
      <span className="badge-dot" aria-hidden="true" />
      {LABEL[phase] ?? phase}
    </span>
  );
}

import { Link, useParams } from 'react-router';
import { useDeploymentWatch } from '../api/live';
import { useRole } from '../auth/AuthProvider';
import { can } from '../auth/roles';
import { PhaseBadge } from '../components/PhaseBadge';
import { ReplicaBar } from '../components/ReplicaBar';
import { Empty, ErrorState, Loading } from '../components/States';
import { useTitle } from '../components/Title';
import { Adapters } from './deployment/Adapters';
import { CreateWarnings } from './deployment/CreateWarnings';
import { DeleteDeployment, EditSpec } from './deployment/Edit';
import { Revisions, Timeline } from './deployment/History';
import { Serving } from './deployment/Serving';
import { Conditions, Endpoints, KubernetesObjects, Replicas } from './deployment/Status';
import { TryIt } from './deployment/TryIt';

/** One deployment, live: where it stands and why, where to call it, its history, and the controls. */
export function DeploymentPage() {
  const { project = '', name = '' } = useParams();
  useTitle(`${name} · ${project}`);
  const editable = can.edit(useRole(project));
  const { deployment, events, deleted, status } = useDeploymentWatch(project, name);
  const list = `/projects/${encodeURIComponent(project)}/deployments`;

  if (deleted) {
    return (
      <Empty title={`${name} was deleted`}>
        <p>
          Its objects were removed from the cluster. <Link to={list}>Back to the deployments</Link>
        </p>
      </Empty>
    );
  }
  if (!deployment) {
    if (status.error && !status.connected) {
      return <ErrorState error={new Error(status.error)} action={<Link to={list}>Back to the deployments</Link>} />;
    }
    return <Loading what={name} />;
  }

  const phase = deployment.status.phase;
  const unhealthy = phase !== 'Ready' && phase !== 'ScaledToZero';
  const failing = deployment.status.conditions.filter((c) => c.status === 'False');
  return (
    <>
      <nav aria-label="Breadcrumb" className="muted">
        <Link to={list}>Deployments</Link> / {name}
      </nav>
      <div className="page-head">
        <h1>{name}</h1>
        <PhaseBadge phase={phase} />
        <ReplicaBar replicas={deployment.status.replicas} />
        <span className="muted">
          generation {deployment.generation}
          {deployment.status.observedGeneration < deployment.generation && ' (not applied yet)'}
        </span>
        <span className={`live${status.connected ? ' live-on' : ''}`} role="status">
          {status.connected ? 'Live' : 'Reconnecting…'}
        </span>
        {editable && (
          <div className="actions">
            <DeleteDeployment deployment={deployment} />
          </div>
        )}
      </div>
      <CreateWarnings />
      {unhealthy && deployment.status.message && (
        <div className={`notice ${phase === 'Failed' || phase === 'Degraded' ? 'notice-bad' : 'notice-warn'}`} role="status">
          <strong>{phase === 'Failed' ? 'Failed: ' : phase === 'Degraded' ? 'Degraded: ' : ''}</strong>
          {deployment.status.message}
          {failing.length > 0 && (phase === 'Failed' || phase === 'Degraded') && (
            <ul>
              {failing.map((c) => (
                <li key={c.type}>
                  {c.type}: {c.reason}
                  {c.message ? ` — ${c.message}` : ''}
                </li>
              ))}
            </ul>
          )}
        </div>
      )}
      <p className="muted mono">
        {deployment.spec.engine?.kind ?? 'vllm'} · {deployment.spec.model.source}
        {deployment.spec.model.servedName && <> · served as {deployment.spec.model.servedName}</>}
      </p>
      <div className="grid-2">
        <div>
          <Endpoints deployment={deployment} />
          <TryIt deployment={deployment} />
          <Replicas deployment={deployment} editable={editable} />
          <Adapters deployment={deployment} editable={editable} />
        </div>
        <div>
          <Conditions deployment={deployment} />
          <Timeline deployment={deployment} live={events} />
        </div>
      </div>
      <Serving deployment={deployment} live={events} />
      <Revisions deployment={deployment} editable={editable} />
      {editable && <EditSpec deployment={deployment} />}
      <KubernetesObjects deployment={deployment} />
    </>
  );
}

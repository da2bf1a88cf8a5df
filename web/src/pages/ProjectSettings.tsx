// The "Tokens & access" page of a project: its tokens, model keys, role bindings, audit log and GPU usage (admins only).
import { useParams } from 'react-router';
import { useRole } from '../auth/AuthProvider';
import { can } from '../auth/roles';
import { Empty } from '../components/States';
import { useTitle } from '../components/Title';
import { Audit } from './settings/Audit';
import { ModelKeys } from './settings/ModelKeys';
import { RoleBindings } from './settings/RoleBindings';
import { Tokens } from './settings/Tokens';
import { Usage } from './settings/Usage';

export function ProjectSettings() {
  const { project = '' } = useParams();
  useTitle(`Tokens & access · ${project}`);
  const role = useRole(project);
  // Every call below needs the admin role: say so instead of showing controls that would fail.
  if (!can.administer(role)) {
    return (
      <Empty title={`You need the admin role on ${project} to manage its tokens and access`}>
        <p>Ask an admin of {project} or a platform admin.</p>
      </Empty>
    );
  }
  return (
    <>
      <div className="page-head">
        <h1>Tokens &amp; access</h1>
      </div>
      <Tokens project={project} />
      <ModelKeys project={project} />
      <RoleBindings project={project} />
      <Usage project={project} />
      <Audit project={project} />
    </>
  );
}

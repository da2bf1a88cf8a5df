import { Navigate, Route, Routes, useParams } from 'react-router';
import { useSyncExternalStore } from 'react';
import { session } from './auth/session';
import type { SignInConfig } from './auth/oidc';
import { AuthGate } from './auth/AuthProvider';
import { useProjects, Layout } from './components/Layout';
import { Empty, ErrorState, Loading } from './components/States';
import { useTitle } from './components/Title';
import { SignIn } from './pages/SignIn';
import { DeploymentList } from './pages/DeploymentList';
import { CreateDeployment } from './pages/CreateDeployment';
import { DeploymentPage } from './pages/DeploymentPage';
import { ProjectSettings } from './pages/ProjectSettings';
import { CreateProject } from './pages/CreateProject';

/** `/`: the first project the caller can see. */
function Home() {
  useTitle('Projects');
  const projects = useProjects();
  if (projects.isPending) return <Loading what="your projects" />;
  if (projects.error) return <ErrorState error={projects.error} />;
  const first = projects.data[0];
  // A fresh installation: say what a project is and make the first one here.
  if (!first) return <CreateProject first />;
  return <Navigate to={`/projects/${encodeURIComponent(first)}/deployments`} replace />;
}

function NotFound() {
  useTitle('Not found');
  return (
    <Empty title="There is no page here">
      <p>
        <a href="/">Go to your deployments</a>.
      </p>
    </Empty>
  );
}

/** Remounts a page when its route parameters change, so no state leaks between them. */
function Keyed({ children }: { children: (key: string) => React.ReactNode }) {
  const params = useParams();
  return <>{children(JSON.stringify(params))}</>;
}

export function App({ signIn = { oidc: null } }: { signIn?: SignInConfig }) {
  const state = useSyncExternalStore(session.subscribe, session.state);
  if (state !== 'signed-in') return <SignIn expired={state === 'expired'} config={signIn} />;
  return (
    <AuthGate>
      <Routes>
        <Route element={<Layout />}>
          <Route index element={<Home />} />
          <Route path="projects/new" element={<CreateProject />} />
          <Route path="projects/:project/deployments" element={<Keyed>{(k) => <DeploymentList key={k} />}</Keyed>} />
          <Route path="projects/:project/deployments/new" element={<Keyed>{(k) => <CreateDeployment key={k} />}</Keyed>} />
          <Route path="projects/:project/deployments/:name" element={<Keyed>{(k) => <DeploymentPage key={k} />}</Keyed>} />
          <Route path="projects/:project/settings" element={<Keyed>{(k) => <ProjectSettings key={k} />}</Keyed>} />
          <Route path="*" element={<NotFound />} />
        </Route>
      </Routes>
    </AuthGate>
  );
}

import { Link, NavLink, Outlet, useNavigate, useParams } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { api, call } from '../api/client';
import { useAuth } from '../auth/AuthProvider';
import { can } from '../auth/roles';

/** The projects the caller can see (a project token sees only its own). */
export function useProjects() {
  const { me } = useAuth();
  return useQuery({
    queryKey: ['projects', me?.name],
    enabled: !!me,
    queryFn: async () => {
      if (me && !me.platformAdmin && me.kind === 'token' && me.project) return [me.project];
      const page = await call(api.GET('/api/v1/projects', { params: { query: { limit: 200 } } }));
      return page.items.map((p) => p.name);
    },
  });
}

export function Layout() {
  const { me, signOut, roleOn } = useAuth();
  const { project } = useParams();
  const projects = useProjects();
  const navigate = useNavigate();
  const role = roleOn(project);
  return (
    <div className="app">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link to="/" className="brand">
          <img src="/favicon.svg" alt="" width="22" height="22" /> modelplane
        </Link>
        {projects.data && project && (
          <label className="project-switcher">
            <span>Project</span>
            <select
              value={project}
              onChange={(e) => navigate(`/projects/${encodeURIComponent(e.target.value)}/deployments`)}
            >
              {!projects.data.includes(project) && <option value={project}>{project}</option>}
              {projects.data.map((p) => (
                <option key={p} value={p}>
                  {p}
                </option>
              ))}
            </select>
          </label>
        )}
        {project && (
          <nav aria-label="Project" className="tabs">
            <NavLink to={`/projects/${encodeURIComponent(project)}/deployments`} end>
              Deployments
            </NavLink>
            {can.administer(role) && (
              <NavLink to={`/projects/${encodeURIComponent(project)}/settings`}>Tokens &amp; access</NavLink>
            )}
          </nav>
        )}
        {me?.platformAdmin && (
          <Link to="/projects/new" className="btn btn-small">
            New project
          </Link>
        )}
        <div className="whoami">
          {me && (
            <span title={me.kind === 'token' ? 'Signed in with an API token' : 'Signed in as a user'}>
              {me.name} <span className="role">{project ? role : me.role ?? ''}</span>
            </span>
          )}
          <button type="button" className="btn btn-small" onClick={signOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Outlet />
      </main>
    </div>
  );
}

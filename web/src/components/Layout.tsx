import { useEffect, useRef, useState, type KeyboardEvent } from 'react';
import { Link, NavLink, Outlet, useLocation, useNavigate, useParams } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { api, call } from '../api/client';
import { useAuth, useRole } from '../auth/AuthProvider';
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

/** Keys that move through a closed select's options one by one (or by type-ahead). */
function browses(e: KeyboardEvent<HTMLSelectElement>): boolean {
  if (e.altKey || e.ctrlKey || e.metaKey) return false;
  return ['ArrowUp', 'ArrowDown', 'Home', 'End', 'PageUp', 'PageDown'].includes(e.key) || e.key.length === 1;
}

/**
 * The project switcher. A pick with the pointer (or from the opened list) goes there at
 * once; arrowing through the closed select only moves the choice, and Enter goes, so a
 * keyboard user is not sent to each project they pass (WCAG 3.2.2, On Input). Leaving it
 * unconfirmed puts the current project back.
 */
function ProjectSwitcher({ project, projects, go }: { project: string; projects: string[]; go: (project: string) => void }) {
  const [choice, setChoice] = useState(project);
  const browsing = useRef(false);
  useEffect(() => setChoice(project), [project]);
  return (
    <label className="project-switcher">
      <span>Project</span>
      <select
        value={choice}
        aria-describedby="project-switcher-hint"
        onKeyDown={(e) => {
          browsing.current = browses(e);
          if (e.key === 'Enter' && choice !== project) go(choice);
        }}
        onChange={(e) => {
          setChoice(e.target.value);
          if (!browsing.current) go(e.target.value);
          browsing.current = false;
        }}
        onBlur={() => setChoice(project)}
      >
        {!projects.includes(project) && <option value={project}>{project}</option>}
        {projects.map((p) => (
          <option key={p} value={p}>
            {p}
          </option>
        ))}
      </select>
      <span id="project-switcher-hint" className="visually-hidden">
        Press Enter to open the chosen project.
      </span>
    </label>
  );
}

/**
 * After a navigation inside the app, focus moves to the new page's heading, as after a
 * page load, so a screen reader starts there; the heading may come after the page's data.
 */
function useFocusHeadingOnNavigation() {
  const { pathname } = useLocation();
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    const main = document.getElementById('main');
    if (!main) return;
    const focus = () => {
      const heading = main.querySelector('h1');
      if (!heading) return false;
      heading.setAttribute('tabindex', '-1');
      heading.focus();
      return true;
    };
    if (focus()) return;
    const observer = new MutationObserver(() => {
      if (focus()) observer.disconnect();
    });
    observer.observe(main, { childList: true, subtree: true });
    const stop = setTimeout(() => observer.disconnect(), 10_000);
    return () => {
      observer.disconnect();
      clearTimeout(stop);
    };
  }, [pathname]);
}

export function Layout() {
  const { me, signOut } = useAuth();
  const { project } = useParams();
  const projects = useProjects();
  const navigate = useNavigate();
  const role = useRole(project);
  useFocusHeadingOnNavigation();
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
          <ProjectSwitcher
            project={project}
            projects={projects.data}
            go={(p) => navigate(`/projects/${encodeURIComponent(p)}/deployments`)}
          />
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

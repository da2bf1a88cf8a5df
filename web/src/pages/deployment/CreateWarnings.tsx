import { useLocation, useNavigate } from 'react-router';

/** What the server warned about when this deployment was created (passed on by the create form). */
export function CreateWarnings() {
  const location = useLocation();
  const navigate = useNavigate();
  const warnings = (location.state as { warnings?: unknown } | null)?.warnings;
  if (!Array.isArray(warnings) || warnings.length === 0) return null;
  return (
    <div className="notice notice-warn" role="status" data-testid="create-warnings">
      <strong>Created, with {warnings.length === 1 ? 'a warning' : `${warnings.length} warnings`} from the server:</strong>
      <ul>
        {warnings.map((w, i) => (
          <li key={i}>{String(w)}</li>
        ))}
      </ul>
      <button
        type="button"
        className="btn btn-small"
        // Forget them, so a reload or Back does not show them again.
        onClick={() => navigate(location.pathname + location.search, { replace: true, state: null })}
      >
        Dismiss
      </button>
    </div>
  );
}

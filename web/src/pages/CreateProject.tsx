import { useState, type FormEvent } from 'react';
import { useNavigate } from 'react-router';
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, call } from '../api/client';
import { useAuth } from '../auth/AuthProvider';
import { Field } from '../components/Field';
import { Empty } from '../components/States';
import { useTitle } from '../components/Title';

/** A new project (platform admins): a name and, optionally, the namespace it maps to. */
export function CreateProject({ first }: { first?: boolean }) {
  useTitle(first ? 'Welcome' : 'New project');
  const { me } = useAuth();
  const navigate = useNavigate();
  const client = useQueryClient();
  const [name, setName] = useState('');
  const [namespace, setNamespace] = useState('');
  const [adopt, setAdopt] = useState(false);
  const create = useMutation({
    mutationFn: () =>
      call(
        api.POST('/api/v1/projects', {
          body: { name: name.trim(), namespace: namespace.trim() || undefined, adoptNamespace: adopt || undefined },
        }),
      ),
    onSuccess: async (project) => {
      await client.invalidateQueries({ queryKey: ['projects'] });
      navigate(`/projects/${encodeURIComponent(project.name)}/deployments`);
    },
  });
  if (!me?.platformAdmin) {
    return (
      <Empty title={first ? 'You have no projects yet' : 'Only a platform admin can create projects'}>
        <p>Ask a platform admin to create a project and give you a token for it.</p>
      </Empty>
    );
  }
  const fields = create.error instanceof ApiError ? create.error.fields : {};
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate();
  };
  return (
    <>
      <div className="page-head">
        <h1>{first ? 'Create your first project' : 'New project'}</h1>
      </div>
      {first && (
        <p>
          A project is a team’s space: its model deployments, tokens and audit log, in one Kubernetes namespace of its own.
        </p>
      )}
      <form className="card" onSubmit={submit} noValidate>
        <Field label="Project name" error={fields.name} hint="Lowercase letters, digits and dashes, e.g. team-a.">
          {(a) => <input {...a} value={name} onChange={(e) => setName(e.target.value)} autoComplete="off" />}
        </Field>
        <Field
          label="Namespace"
          error={fields.namespace}
          hint="The Kubernetes namespace its objects live in; empty uses the project name. It cannot change later."
        >
          {(a) => <input {...a} value={namespace} onChange={(e) => setNamespace(e.target.value)} autoComplete="off" />}
        </Field>
        <div className="field field-check">
          <label>
            <input type="checkbox" checked={adopt} onChange={(e) => setAdopt(e.target.checked)} /> Adopt an existing
            namespace (it then survives the project)
          </label>
        </div>
        {create.error && !Object.keys(fields).length && (
          <p className="field-error" role="alert">
            {create.error.message}
          </p>
        )}
        <button type="submit" className="btn btn-primary" disabled={create.isPending}>
          Create project
        </button>
      </form>
    </>
  );
}

-- The autoscaler's side of a deployment with `spec.autoscaling`: the replica count it set
-- and its last decision. Beside the record, not in its spec or status: a decision is no
-- new generation (the ETag and revisions stay), and the reconciler's status writes never
-- race it. Written only by the worker that collects the serving metrics.
create table deployment_autoscaling (
    deployment_id uuid primary key references model_deployment (id) on delete cascade,
    project_id uuid not null,
    -- What the deployment's model-server Deployment is set to.
    replicas integer not null check (replicas >= 0),
    -- The last decision (`AutoscalingStatus`, camelCase JSON).
    state jsonb not null,
    updated_at timestamptz not null default now()
);
create index deployment_autoscaling_project on deployment_autoscaling (project_id);

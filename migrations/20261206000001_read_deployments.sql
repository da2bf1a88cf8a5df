-- A batch of gets (`store::lookups`) in one call: the deployments named by the pairs
-- (projects[i], names[i]) that exist, with what a get shows beside each one's status, as
-- `store::deployments::DeploymentRead` reads them (the columns of `deployment_read_columns!`,
-- which must stay the same).
--
-- A function for its plan: as a prepared statement, Postgres planned the batch afresh on
-- every execution (`unnest` of a parameter is estimated at 100 rows, of the bound array at its
-- length, so the custom plan always looked cheaper) and planning cost more than running it:
-- about a quarter of Postgres's CPU per get under load. Each pair is one probe of the unique
-- key whatever the statistics, so the generic plan is right, kept for the connection's life.
create function read_deployments(projects uuid[], names text[])
returns table (
    id uuid, project_id uuid, name text, generation bigint, spec jsonb, status jsonb,
    restarted_at timestamptz, deletion_requested_at timestamptz, canary jsonb,
    created_at timestamptz, updated_at timestamptz,
    load jsonb, canary_load jsonb, autoscaling jsonb
)
    language plpgsql stable
    set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
    return query
    select d.id, d.project_id, d.name, d.generation, d.spec, d.status,
           d.restarted_at, d.deletion_requested_at, d.canary, d.created_at, d.updated_at,
           (select l.load from deployment_load l where l.deployment_id = d.id and l.track = 'all'),
           (select l.load from deployment_load l where l.deployment_id = d.id and l.track = 'canary'),
           case when d.spec ? 'autoscaling' then
               (select a.state from deployment_autoscaling a where a.deployment_id = d.id)
           end
    from model_deployment d
    join unnest(projects, names) as k(project_id, name)
      on d.project_id = k.project_id and d.name = k.name;
end
$$;

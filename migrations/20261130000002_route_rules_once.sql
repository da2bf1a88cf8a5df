-- The route rules that need the other deployments have one implementation: this function.
-- A create runs them inside create_deployment_record (one call, batched with other creates,
-- so the rules cannot run in Rust between its statements); a spec change calls it directly,
-- in its transaction, after taking the same route-space lock. They used to be written twice,
-- here and in Rust, where a rule changed in one place would silently differ in the other.
-- The rules that need no other row (a shared Gateway's project prefix, wildcards, reserved
-- names) stay in Rust (domain::routing), which both paths run before the database.
--
-- Raises, with the caller's route space locked:
--   SQLSTATE MP001  another project's deployment routes the hostname
--   SQLSTATE MP002  a deployment of the project (other than except_id) routes an
--                   overlapping path on the same Gateway and hostname; DETAIL is its name
--                   and path, separated by a space
create function check_route_claim(
    of_project uuid, except_id uuid, on_gateway text, on_hostname text, on_path text,
    path_and_ancestors text[]
) returns void
    -- Volatile: its statements see every commit up to the moment they run, so a caller that
    -- took the route-space lock first sees every route written before it got the lock.
    language plpgsql volatile
    set plan_cache_mode = force_generic_plan
as $$
declare
    other text;
begin
    if on_hostname is not null then
        if exists (
            select 1 from model_deployment d
            where d.route_hostname = on_hostname and d.project_id <> of_project
        ) then
            raise exception 'hostname % is routed by another project', on_hostname
                using errcode = 'MP001';
        end if;
    end if;
    select o.name || ' ' || o.route_path into other
    from first_overlapping_route(of_project, except_id, on_gateway, on_hostname, on_path, path_and_ancestors) o;
    if other is not null then
        raise exception 'path % overlaps another deployment''s', on_path
            using errcode = 'MP002', detail = other;
    end if;
end
$$;

-- As in migration create_in_one_call, with the route rules called from check_route_claim.
create or replace function create_deployment_record(
    check_quota boolean,
    new_id uuid, of_project uuid, new_name text, new_spec jsonb, new_spec_version integer,
    new_labels jsonb, new_engine text, new_phase text, new_status jsonb,
    on_gateway text, on_hostname text, on_path text,
    route_space text, route_paths text[], path_and_ancestors text[],
    event_message text, by_actor text, new_trace_parent text
) returns table (outcome text, created model_deployment)
    language plpgsql volatile
    -- The route lookups are probes of an index nothing else serves (migration route_key): the
    -- generic plan is right whatever the statistics, and re-planning cost a third of a create.
    set plan_cache_mode = force_generic_plan
as $$
declare
    row_created model_deployment;
    queued_items bigint;
begin
    -- The quota first, then the route space: the order every spec change takes them in.
    if check_quota then
        perform 1 from project_quota q where q.project_id = of_project for update;
        if found then
            outcome := 'admission';
            return next;
            return;
        end if;
    end if;
    perform lock_route_space(route_space, route_paths);
    insert into model_deployment
        (id, project_id, name, spec, spec_version, labels, engine, phase, status,
         route_gateway, route_hostname, route_path)
    values (new_id, of_project, new_name, new_spec, new_spec_version, new_labels, new_engine,
            new_phase, new_status, on_gateway, on_hostname, on_path)
    on conflict (project_id, name) do nothing
    returning * into row_created;
    if not found then
        outcome := 'name_taken';
        return next;
        return;
    end if;
    perform check_route_claim(of_project, new_id, on_gateway, on_hostname, on_path, path_and_ancestors);

    -- One statement: each costs an executor start and end.
    with revision as (
        insert into deployment_revision (deployment_id, revision, spec, reason, actor)
        values (new_id, row_created.generation, new_spec, 'created', by_actor)
    ), event as (
        insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
        values (new_id, of_project, new_name, 'Created', event_message, by_actor)
    ), queued as (
        insert into reconcile_work (deployment_id, trace_parent) values (new_id, new_trace_parent)
        returning deployment_id
    )
    select count(pg_notify('modelplane_reconcile', q.deployment_id::text)) from queued q
    into queued_items;
    outcome := 'created';
    created := row_created;
    return next;
end
$$;

-- A create in one round trip. A create was five (BEGIN, the quota lock, the route-space lock,
-- the insert, COMMIT), and on the benchmark machine the round trips, not the rows, were most
-- of what a create cost Postgres and the API. `create_deployment_record` does the locks, the
-- checks and the writes in one call, which a request without an Idempotency-Key, a dry run or
-- a GPU runs on its own (autocommit); other creates run it inside their transaction.
--
-- Each statement in a VOLATILE function takes a fresh snapshot ("VOLATILE functions obtain a
-- fresh snapshot at the start of each query they execute", PostgreSQL docs, "Function
-- Volatility Categories"), so the checks after the route-space lock see every earlier
-- holder's commit, as the separate statements did.

-- The route-space lock's keys, one definition for every writer: with no paths the whole
-- space (exclusive), else the path hierarchy from the root down, shared on every ancestor and
-- exclusive on the path itself, so only writers of overlapping paths take turns. In byte
-- order a path's ancestors come before it, so taking keys in that order is root first.
create function route_space_keys(space text, paths text[])
    returns table (key text, exclusive boolean)
    language sql immutable
as $$
    select 'route:' || space, true where coalesce(cardinality(paths), 0) = 0
    union all
    select 'route:' || space || ':' || p.path, p.i = cardinality(paths)
    from unnest(paths) with ordinality as p (path, i)
$$;

-- Takes one route key's lock until the transaction ends.
create function lock_route_key(key text, exclusive boolean) returns void
    language plpgsql volatile
as $$
begin
    if exclusive then
        perform pg_advisory_xact_lock(hashtextextended(key, 0));
    else
        perform pg_advisory_xact_lock_shared(hashtextextended(key, 0));
    end if;
end
$$;

-- Takes a route space's locks (see route_space_keys), root first.
create function lock_route_space(space text, paths text[]) returns void
    language plpgsql volatile
as $$
declare
    k record;
begin
    for k in select * from route_space_keys(space, paths) order by key collate "C" loop
        perform lock_route_key(k.key, k.exclusive);
    end loop;
end
$$;

-- Creates a deployment: the row, revision 1, the `Created` timeline entry and its reconcile
-- work item (waking the workers). Answers `outcome`:
--   created     written
--   admission   check_quota was asked and the project has a quota: nothing is written; the
--               caller admits the create against it (in a transaction) and calls again
--               without the check
--   name_taken  the project has a deployment of that name: nothing is written
-- A route another deployment holds fails the call, so that nothing of it stays written:
--   SQLSTATE MP001  another project's deployment routes the hostname
--   SQLSTATE MP002  a deployment of the project routes an overlapping path on the same Gateway
--                   and hostname; DETAIL is its name and path, separated by a space
-- The name is checked by the insert itself (ON CONFLICT on the unique key), not by a lookup
-- whose plan could walk the project: a plan made on an empty table, kept for as long as the
-- connection lives while no ANALYZE has run, did that through the `(project_id, phase)` index.
create function create_deployment_record(
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
    other text;
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
    from first_overlapping_route(of_project, new_id, on_gateway, on_hostname, on_path, path_and_ancestors) o;
    if other is not null then
        raise exception 'path % overlaps another deployment''s', on_path
            using errcode = 'MP002', detail = other;
    end if;

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

-- Creates several deployments in one transaction, so that they share one commit (the change
-- feed's commit-order lock and the WAL flush are taken once, not once per create). `items` is
-- a JSON array of create_deployment_record's arguments by name, quota checked. Answers one row
-- per item (`item` counts from 1): its outcome, or `error` with the SQLSTATE and DETAIL that
-- failed it; each item runs in its own subtransaction, so a failed one leaves nothing and the
-- others stand.
--
-- Every lock the batch needs is taken first, in the order every other writer takes them: the
-- quota rows of its projects (by id), then its route spaces' keys in byte order (root first,
-- as one create takes them). The items are then written in one order too, by project and
-- name, since an insert waits for another transaction's uncommitted row of the same name.
-- Writers that wait for one another only in one order cannot deadlock.
--
-- No lock is waited for longer than lock_timeout: past it the statement fails (and rolls
-- back) or, inside an item, the item does, and the caller runs those creates again alone. A
-- batch is never abandoned by its caller while it may still commit.
create function create_deployment_records(items jsonb)
    returns table (item bigint, outcome text, created model_deployment, error_code text, error_detail text)
    language plpgsql volatile
    set plan_cache_mode = force_generic_plan
    set lock_timeout = '5s'
as $$
declare
    r record;
    k record;
    one record;
begin
    perform 1 from project_quota q
    where q.project_id in (select (x ->> 'of_project')::uuid from jsonb_array_elements(items) x)
    order by q.project_id
    for update;
    for k in
        select s.key, bool_or(s.exclusive) as exclusive
        from jsonb_to_recordset(items) as x (route_space text, route_paths text[]),
             lateral route_space_keys(x.route_space, x.route_paths) s
        group by s.key
        order by s.key collate "C"
    loop
        perform lock_route_key(k.key, k.exclusive);
    end loop;

    for r in
        select e.n, x.*
        from jsonb_array_elements(items) with ordinality as e (value, n),
             lateral jsonb_to_record(e.value) as x (
                 new_id uuid, of_project uuid, new_name text, new_spec jsonb,
                 new_spec_version integer, new_labels jsonb, new_engine text, new_phase text,
                 new_status jsonb, on_gateway text, on_hostname text, on_path text,
                 route_space text, route_paths text[], path_and_ancestors text[],
                 event_message text, by_actor text, new_trace_parent text)
        order by x.of_project, x.new_name, e.n
    loop
        item := r.n;
        created := null;
        error_code := null;
        error_detail := null;
        begin
            select c.outcome, c.created into one
            from create_deployment_record(true, r.new_id, r.of_project, r.new_name, r.new_spec,
                r.new_spec_version, r.new_labels, r.new_engine, r.new_phase, r.new_status,
                r.on_gateway, r.on_hostname, r.on_path, r.route_space, r.route_paths,
                r.path_and_ancestors, r.event_message, r.by_actor, r.new_trace_parent) c;
            outcome := one.outcome;
            created := one.created;
        exception when others then
            get stacked diagnostics error_code = returned_sqlstate, error_detail = pg_exception_detail;
            outcome := 'error';
            created := null;
        end;
        return next;
    end loop;
end
$$;

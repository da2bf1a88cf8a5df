-- The overlap check read every route of a project on each create (the rule was a filter no
-- index could serve, in a strict SQL function Postgres ran once per row), so creates slowed
-- as a project grew. The same rule, now one lookup that an index serves whatever the
-- planner's statistics say: the paths overlapping `path` are `path`, its ancestors and the
-- root (one index probe each; the caller passes them, as `RouteClaim::path_and_ancestors`
-- lists them for the route-space lock), and the paths below it (one range of the index in
-- byte order). Paths start with '/' and have no trailing '/' except the root; '0' is the byte
-- after '/'.
drop function route_paths_overlap(text, text);

create index model_deployment_route_path_idx
    on model_deployment (project_id, route_gateway, (route_path collate "C"));
drop index model_deployment_route_idx;

-- The first (by name) deployment of `of_project`, other than `except_id`, whose route on
-- `on_gateway` and `on_hostname` overlaps `path`: one would receive the other's requests.
create function first_overlapping_route(
    of_project uuid, except_id uuid, on_gateway text, on_hostname text, path text, path_and_ancestors text[]
) returns table (name text, route_path text)
    language sql stable parallel safe
as $$
    select c.name, c.route_path from (
        -- LATERAL with LIMIT: a nested loop of index probes, never a scan of the project.
        select o.name, o.route_path
        from unnest(path_and_ancestors) as p (path),
             lateral (select d.name, d.route_path from model_deployment d
                      where d.project_id = of_project and d.route_gateway = on_gateway
                        and (d.route_path collate "C") = p.path and d.id <> except_id
                        and d.route_hostname is not distinct from on_hostname
                      order by d.name limit 1) as o
        union all
        -- No ORDER BY here: ordered by name, the planner could walk the project's name index.
        select d.name, d.route_path from model_deployment d
        where d.project_id = of_project and d.route_gateway = on_gateway
          and (d.route_path collate "C") >= (case when path = '/' then '/' else path || '/' end)
          and (d.route_path collate "C") < (case when path = '/' then '0' else path || '0' end)
          and d.id <> except_id and d.route_hostname is not distinct from on_hostname
    ) as c
    order by c.name limit 1
$$;

-- The route-overlap lookup as probes of one expression index that nothing else can serve, so
-- every plan Postgres may choose for it is a probe of that index, whatever its statistics
-- say. The lookup of 20261125000003 filtered on columns that two other indexes lead with
-- (`project_id`), and a plan made while the table had no statistics walked the whole project
-- through one of those, for as long as the plan lived.
--
-- The key is the project, the Gateway and the path, joined by spaces: neither a project id
-- nor a Gateway key (`namespace/name`, DNS names) has one, so a key's prefix up to the path
-- names exactly one project and Gateway, and the paths below `path` are one range of keys
-- in byte order ('0' is the byte after '/').
create index model_deployment_route_key_idx
    on model_deployment (((project_id::text || ' ' || route_gateway || ' ' || route_path) collate "C"));
drop index model_deployment_route_path_idx;

create or replace function first_overlapping_route(
    of_project uuid, except_id uuid, on_gateway text, on_hostname text, path text, path_and_ancestors text[]
) returns table (name text, route_path text)
    language sql stable parallel safe
as $$
    select c.name, c.route_path from (
        -- LATERAL with LIMIT: one index probe per path, never a scan of the project.
        select o.name, o.route_path
        from unnest(path_and_ancestors) as p (path),
             lateral (select d.name, d.route_path from model_deployment d
                      where ((d.project_id::text || ' ' || d.route_gateway || ' ' || d.route_path) collate "C")
                            = (of_project::text || ' ' || on_gateway || ' ' || p.path)
                        and d.id <> except_id
                        and d.route_hostname is not distinct from on_hostname
                      order by d.name limit 1) as o
        union all
        select d.name, d.route_path from model_deployment d
        where ((d.project_id::text || ' ' || d.route_gateway || ' ' || d.route_path) collate "C")
              >= (of_project::text || ' ' || on_gateway || ' ' || case when path = '/' then '/' else path || '/' end)
          and ((d.project_id::text || ' ' || d.route_gateway || ' ' || d.route_path) collate "C")
              < (of_project::text || ' ' || on_gateway || ' ' || case when path = '/' then '0' else path || '0' end)
          and d.id <> except_id and d.route_hostname is not distinct from on_hostname
    ) as c
    order by c.name limit 1
$$;

-- The overlap check read every route of a project on each create (the rule was a filter no
-- index could serve, in a function Postgres could not inline), so creates slowed as a project
-- grew. The same rule, written so that an index finds the candidates: the paths overlapping
-- `b` are `b`, its ancestors and the root (one index probe each; the caller passes them, as
-- `RouteClaim::path_and_ancestors` lists them for the route-space lock), and the paths below
-- `b` (one range of the index in byte order). Paths start with '/' and have no trailing '/'
-- except the root; '0' is the byte after '/'.
drop function route_paths_overlap(text, text);

-- Not strict and a single expression, so the planner inlines it and sees index conditions.
create function route_paths_overlap(a text, b text, b_and_ancestors text[]) returns boolean
    language sql immutable parallel safe
as $$
    select (a collate "C") = any (b_and_ancestors)
        or ((a collate "C") >= (case when b = '/' then '/' else b || '/' end)
            and (a collate "C") < (case when b = '/' then '0' else b || '0' end))
$$;

create index model_deployment_route_path_idx
    on model_deployment (project_id, route_gateway, (route_path collate "C"));
drop index model_deployment_route_idx;

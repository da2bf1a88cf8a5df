-- Where each deployment's route sits on its Gateway, copied from the spec when it is
-- written, so the API can refuse a route that would take another deployment's requests.
alter table model_deployment
    -- `namespace/name` of the Gateway; empty for the server's default Gateway.
    add column route_gateway  text not null default '',
    add column route_hostname text,
    -- The effective path prefix (no trailing '/', except the root).
    add column route_path     text not null default '/';

update model_deployment d
set route_gateway = coalesce(substring(d.spec -> 'routing' ->> 'gateway' from '^[^/]+/[^/]+'), ''),
    route_hostname = d.spec -> 'routing' ->> 'hostname',
    route_path = case
        when d.spec -> 'routing' ->> 'pathPrefix' is not null
            then coalesce(nullif(rtrim(d.spec -> 'routing' ->> 'pathPrefix', '/'), ''), '/')
        when d.spec -> 'routing' ->> 'hostname' is not null then '/'
        else '/' || p.name || '/' || d.name
    end
from project p
where p.id = d.project_id;

create index model_deployment_route_hostname_idx on model_deployment (route_hostname)
    where route_hostname is not null;
create index model_deployment_route_idx on model_deployment (project_id, route_gateway);

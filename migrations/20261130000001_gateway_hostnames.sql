-- The hostnames each Gateway answers for, as the worker last saw the Gateway: its listeners'
-- exact hostnames and the Hostname-type addresses in its status. A route on that Gateway
-- may not claim one (it would outrank every project's host-less routes for that host, by
-- the Gateway API's hostname precedence), whether or not the platform listed it in
-- MODELPLANE_RESERVED_HOSTNAMES.
create table gateway_hostname (
    -- `namespace/name` of the Gateway.
    gateway text not null,
    hostname text not null,
    primary key (gateway, hostname)
);

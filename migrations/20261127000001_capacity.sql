-- GPU capacity and quotas (src/domain/capacity.rs).

-- The cluster's GPU nodes as the worker last saw them (src/reconciler/inventory.rs): one
-- row per node and GPU resource name. The API reads it to answer `GET /capacity` and to
-- check at write time whether a deployment can fit.
create table gpu_node (
    name                    text not null,
    resource_name           text not null,
    -- The node's GPU product label; '' when the node has none.
    product                 text not null default '',
    allocatable             bigint not null check (allocatable >= 0),
    -- By every pod bound to the node that has not finished, and by modelplane's of them.
    requested               bigint not null check (requested >= 0),
    requested_by_modelplane bigint not null check (requested_by_modelplane >= 0),
    ready                   boolean not null,
    -- False when the node is cordoned (`spec.unschedulable`).
    schedulable             boolean not null,
    updated_at              timestamptz not null default now(),
    primary key (name, resource_name)
);

-- When a worker last reported the inventory (one row): before it, capacity is unknown.
create table gpu_inventory (
    singleton   boolean primary key default true check (singleton),
    observed_at timestamptz not null,
    worker      text not null
);

-- A project's quota: at most `replicas` model-server pods and, per entry of `gpus`
-- (`[{"resourceName", "product", "limit"}]`), at most `limit` GPUs, counted from the specs
-- (replicas x GPUs per replica, canaries included). No row: no quota. Writers of a
-- project with a quota lock its row, so two concurrent changes cannot both fit.
create table project_quota (
    project_id uuid primary key references project (id) on delete cascade,
    replicas   bigint check (replicas >= 0),
    gpus       jsonb not null default '[]',
    updated_at timestamptz not null default now(),
    updated_by text not null
);

-- GPUs held by a deployment's ready pods, as intervals: the worker closes the open ones
-- and opens new ones whenever the count changes. GPU-hours are summed from them, so
-- nothing is written while nothing changes. No foreign key to the deployment: the
-- history outlives it (chargeback).
create table gpu_usage (
    id              bigint generated always as identity primary key,
    project_id      uuid not null references project (id) on delete cascade,
    deployment_id   uuid not null,
    deployment_name text not null,
    -- `stable` or `canary`.
    track           text not null,
    resource_name   text not null,
    product         text not null default '',
    gpus            bigint not null check (gpus > 0),
    started_at      timestamptz not null,
    ended_at        timestamptz,
    check (ended_at is null or ended_at >= started_at)
);

create index gpu_usage_open on gpu_usage (deployment_id) where ended_at is null;
create index gpu_usage_project_time on gpu_usage (project_id, started_at);

-- Every node's labels as the worker last saw them (gpu_node keeps GPU nodes only): what a
-- spec's nodeSelector is checked against when it is written, so a selector no node
-- matches is said at once instead of after the unschedulable budget.
create table cluster_node (
    name text primary key,
    labels jsonb not null default '{}'::jsonb,
    updated_at timestamptz not null default now()
);

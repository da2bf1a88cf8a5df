-- Projects (tenants), model deployments, their revisions and timeline, the
-- reconcile work queue and remembered idempotent responses.

create table project (
    id                uuid primary key,
    name              text not null unique,
    -- Fixed at creation: the Kubernetes namespace this project's objects live in.
    namespace         text not null unique,
    -- True when the namespace existed before the project and must survive it.
    namespace_adopted boolean not null default false,
    created_at        timestamptz not null default now()
);

create table model_deployment (
    id                    uuid primary key,
    project_id            uuid not null references project (id) on delete restrict,
    name                  text not null,
    -- Bumped by every accepted spec change; the ETag is derived from it.
    generation            bigint not null default 1,
    spec                  jsonb not null,
    spec_version          integer not null,
    -- Copies of spec fields that lists filter on.
    labels                jsonb not null default '{}'::jsonb,
    engine                text not null,
    phase                 text not null default 'Pending',
    status                jsonb not null,
    -- Restart marker: lives outside the spec so a restart is not a spec change.
    restarted_at          timestamptz,
    deletion_requested_at timestamptz,
    created_at            timestamptz not null default now(),
    updated_at            timestamptz not null default now(),
    constraint model_deployment_project_name_key unique (project_id, name)
);
create index model_deployment_labels_idx on model_deployment using gin (labels);
create index model_deployment_phase_idx on model_deployment (project_id, phase);

create table deployment_revision (
    deployment_id uuid not null references model_deployment (id) on delete cascade,
    -- Equal to the generation the spec was accepted as.
    revision      bigint not null,
    spec          jsonb not null,
    -- What made it: created, updated, replaced, scaled, rolled back.
    reason        text not null,
    actor         text not null,
    created_at    timestamptz not null default now(),
    primary key (deployment_id, revision)
);

-- The timeline: keyed by the deployment's id without a foreign key, so it outlives the record.
create table deployment_event (
    id              bigint generated always as identity primary key,
    deployment_id   uuid not null,
    project_id      uuid not null,
    deployment_name text not null,
    kind            text not null,
    message         text not null,
    actor           text not null,
    created_at      timestamptz not null default clock_timestamp()
);
create index deployment_event_deployment_idx on deployment_event (deployment_id, id);

-- One row per deployment that needs reconciling; claimed with FOR UPDATE SKIP LOCKED.
create table reconcile_work (
    deployment_id    uuid primary key,
    enqueued_at      timestamptz not null default now(),
    run_after        timestamptz not null default now(),
    attempts         integer not null default 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    last_error       text
);
create index reconcile_work_run_after_idx on reconcile_work (run_after);

-- Responses remembered for 24 hours per (project, caller, Idempotency-Key).
create table idempotency_key (
    project_id      uuid not null references project (id) on delete cascade,
    caller          text not null,
    key             text not null,
    request_hash    text not null,
    response_status integer,
    response_body   jsonb,
    created_at      timestamptz not null default now(),
    primary key (project_id, caller, key)
);

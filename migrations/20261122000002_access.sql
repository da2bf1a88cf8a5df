-- API tokens, role bindings for OIDC users and groups, and the audit log of
-- changes that are not about one deployment (projects, tokens, role bindings).

create table api_token (
    id           uuid primary key,
    name         text not null,
    -- SHA-256 of the secret, hex; the secret itself is never stored.
    token_hash   text not null unique,
    -- Null for a platform-admin token.
    project_id   uuid references project (id) on delete cascade,
    role         text not null check (role in ('viewer', 'editor', 'admin', 'platform-admin')),
    created_by   text not null,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    check ((project_id is null) = (role = 'platform-admin'))
);
-- Names are unique among a project's (or the platform's) live tokens.
create unique index api_token_live_name_idx
    on api_token (coalesce(project_id, '00000000-0000-0000-0000-000000000000'::uuid), name)
    where revoked_at is null;

create table role_binding (
    id           uuid primary key,
    project_id   uuid not null references project (id) on delete cascade,
    subject_kind text not null check (subject_kind in ('user', 'group')),
    subject      text not null,
    role         text not null check (role in ('viewer', 'editor', 'admin')),
    created_by   text not null,
    created_at   timestamptz not null default now(),
    constraint role_binding_subject_key unique (project_id, subject_kind, subject)
);

create table audit_event (
    id         bigint generated always as identity primary key,
    -- Null for platform-level changes; no foreign key, so the log outlives the project.
    project_id uuid,
    kind       text not null,
    target     text not null,
    message    text not null,
    actor      text not null,
    created_at timestamptz not null default clock_timestamp()
);
create index audit_event_project_idx on audit_event (project_id, id);

-- Model keys: project-scoped credentials for calling a project's models through the Gateway
-- (API tokens manage modelplane; model keys only call models). Only the secret's SHA-256 is
-- stored; `prefix` (the secret's first characters) lets a person tell keys apart.
create table model_key (
    id uuid primary key,
    project_id uuid not null references project (id) on delete cascade,
    name text not null,
    prefix text not null,
    key_hash text not null unique,
    -- The deployments (by name) it may call; null: every deployment of the project.
    deployments text[],
    -- Requests a minute it may send; null: no limit.
    requests_per_minute integer check (requests_per_minute > 0),
    -- Model tokens (prompt and completion) a day it may use; null: no budget.
    daily_token_budget bigint check (daily_token_budget > 0),
    created_by text not null,
    created_at timestamptz not null default now(),
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
);
create unique index model_key_live_name_idx on model_key (project_id, name) where revoked_at is null;
create index model_key_project_idx on model_key (project_id, id desc);

-- Every process's key cache follows the table: a created, revoked or deleted key is said
-- on this channel (the payload: its id), so a revocation stops the key everywhere at once.
create function model_key_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('modelplane_model_keys', coalesce(new.id, old.id)::text);
    return null;
end $$;
create trigger model_key_changed
    after insert or delete or update of revoked_at, expires_at, deployments, requests_per_minute, daily_token_budget
    on model_key for each row execute function model_key_notify();

-- Requests let through per key and minute, added by every process that checks keys once a
-- second: the shared count its rate limit reads, and the key's usage.
create table model_key_usage (
    key_id uuid not null references model_key (id) on delete cascade,
    minute timestamptz not null,
    requests bigint not null check (requests >= 0),
    primary key (key_id, minute)
);

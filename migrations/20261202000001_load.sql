-- Serving metrics: what each deployment's model servers report about themselves.
--
-- `deployment_load` holds the last reading per deployment and track (`status.load`): one
-- row per deployment (`all`), plus `stable` and `canary` while a canary track exists.
-- Rows of deleted deployments are never read (reads start from `model_deployment`) and are
-- pruned with the samples; no foreign key, so a reading written while a deployment is
-- deleted cannot fail the whole batch.
create table deployment_load (
    deployment_id uuid not null,
    track         text not null check (track in ('all', 'stable', 'canary')),
    load          jsonb not null,
    primary key (deployment_id, track)
);

-- The series: a fine one (a reading per collection interval, kept 24 hours) and a coarse
-- one (5-minute rollups of the fine one, kept 30 days). `track`: 0 all, 1 stable, 2
-- canary. Figures are `real` (4 bytes): these are measurements, not money.
create table load_sample_fine (
    deployment_id                uuid not null,
    project_id                   uuid not null,
    track                        smallint not null,
    at                           timestamptz not null,
    replicas                     smallint not null,
    requests_per_second          real,
    prompt_tokens_per_second     real,
    generation_tokens_per_second real,
    ttft_p50_seconds             real,
    ttft_p95_seconds             real,
    inter_token_latency_p50_seconds real,
    e2e_latency_p95_seconds      real,
    waiting                      real,
    running                      real,
    kv_cache_usage               real,
    error_rate                   real,
    primary key (deployment_id, track, at)
);
-- Rows arrive in time order: a BRIN index finds the old ones to prune at a few pages' cost.
create index load_sample_fine_at on load_sample_fine using brin (at);
create index load_sample_fine_project on load_sample_fine (project_id, at) where track = 0;

create table load_sample_coarse (like load_sample_fine including all);

-- Model keys: a concurrency limit, and requests counted per deployment as well as per key
-- and minute (a deployment's metered tokens are shared among the keys that called it).

-- Requests in flight at once it may have; null: no limit.
alter table model_key add column max_concurrent integer check (max_concurrent > 0);

drop trigger model_key_changed on model_key;
create trigger model_key_changed
    after insert or delete or update of revoked_at, expires_at, deployments, requests_per_minute,
        daily_token_budget, max_concurrent
    on model_key for each row execute function model_key_notify();

-- Rows counted before this migration name no deployment: the nil id.
alter table model_key_usage
    add column deployment_id uuid not null default '00000000-0000-0000-0000-000000000000';
alter table model_key_usage alter column deployment_id drop default;
alter table model_key_usage drop constraint model_key_usage_pkey;
alter table model_key_usage add primary key (key_id, minute, deployment_id);
create index model_key_usage_deployment_idx on model_key_usage (deployment_id, minute);

-- A deployment's model tokens (prompt and generated) per UTC day in [since, until), from
-- its serving metrics: each fine sample's rate times the time since the one before (at most
-- 5 minutes) while fine samples are kept, each 5-minute rollup's rate times 5 minutes before
-- that. An estimate as good as the readings: a gap in them is a gap in the count.
create function deployment_tokens(ids uuid[], since timestamptz, until timestamptz)
returns table (deployment_id uuid, day date, tokens double precision)
language sql stable as $$
    with fine as (
        select s.deployment_id, s.at,
               (coalesce(s.prompt_tokens_per_second, 0) + coalesce(s.generation_tokens_per_second, 0))
               * least(extract(epoch from s.at - lag(s.at) over (partition by s.deployment_id order by s.at)), 300)
                   as tokens
        from load_sample_fine s
        where s.track = 0 and s.deployment_id = any(ids)
          and s.at >= since - interval '5 minutes' and s.at < until
    ),
    kept as (
        select f.deployment_id, min(f.at) as since
        from load_sample_fine f where f.track = 0 and f.deployment_id = any(ids)
        group by 1
    )
    select x.deployment_id, (x.at at time zone 'UTC')::date, sum(x.tokens)::float8
    from (
        select deployment_id, at, tokens from fine where at >= since and tokens is not null
        union all
        select c.deployment_id, c.at,
               (coalesce(c.prompt_tokens_per_second, 0) + coalesce(c.generation_tokens_per_second, 0)) * 300
        from load_sample_coarse c left join kept k on k.deployment_id = c.deployment_id
        where c.track = 0 and c.deployment_id = any(ids) and c.at >= since and c.at < until
          and (k.since is null or c.at + interval '5 minutes' <= k.since)
    ) x
    group by 1, 2
$$;

-- Each key's share of the tokens of the deployments it called, per UTC day in
-- [since, until): a deployment's tokens of a day divided among the keys that called it that
-- day in proportion to their requests (the model server counts tokens, not who asked).
create function key_tokens(keys uuid[], since timestamptz, until timestamptz)
returns table (key_id uuid, deployment_id uuid, day date, requests bigint, tokens double precision)
language sql stable as $$
    with calls as (
        select u.key_id, u.deployment_id, (u.minute at time zone 'UTC')::date as day,
               sum(u.requests)::bigint as requests
        from model_key_usage u
        where u.key_id = any(keys) and u.minute >= since and u.minute < until
        group by 1, 2, 3
    ),
    everyone as (
        select u.deployment_id, (u.minute at time zone 'UTC')::date as day,
               sum(u.requests)::float8 as requests
        from model_key_usage u
        where u.deployment_id in (select c.deployment_id from calls c)
          and u.minute >= since and u.minute < until
        group by 1, 2
    ),
    metered as (
        select * from deployment_tokens(array(select distinct c.deployment_id from calls c), since, until)
    )
    select c.key_id, c.deployment_id, c.day, c.requests,
           coalesce(m.tokens * c.requests / nullif(e.requests, 0), 0)
    from calls c
    join everyone e on e.deployment_id = c.deployment_id and e.day = c.day
    left join metered m on m.deployment_id = c.deployment_id and m.day = c.day
$$;

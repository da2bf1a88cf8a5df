//! Serving metrics: the last reading per deployment and track (`deployment_load`), and the
//! fine and coarse series (`load_sample_fine`, `load_sample_coarse`). See the migration
//! `…_load.sql` for the layout and retention.
//!
//! The series queries pick their table at run time (fine or coarse, the same columns), so
//! they are built with `sqlx::query_as` from a fixed table name, not the checked macros.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use tracing::instrument;
use uuid::Uuid;

use crate::domain::{Load, LoadFigures, LoadSample, Track};

/// Which stored series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// One reading per collection interval, kept a day.
    Fine,
    /// Five-minute rollups, kept thirty days.
    Coarse,
}

impl Resolution {
    fn table(self) -> &'static str {
        match self {
            Self::Fine => "load_sample_fine",
            Self::Coarse => "load_sample_coarse",
        }
    }
}

/// Which rows of a deployment a reading or a series is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every pod of the deployment, whatever its track.
    All,
    Track(Track),
}

impl Scope {
    fn code(self) -> i16 {
        match self {
            Self::All => 0,
            Self::Track(Track::Stable) => 1,
            Self::Track(Track::Canary) => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Track(t) => t.as_str(),
        }
    }
}

/// One reading to write.
#[derive(Debug, Clone)]
pub struct Reading {
    pub deployment_id: Uuid,
    pub project_id: Uuid,
    pub scope: Scope,
    pub load: Load,
    /// Stored as a sample too (a fresh reading); a stale one only updates the current load.
    pub sample: Option<LoadSample>,
}

/// Writes one round of readings in one transaction: the current loads, the fine samples,
/// and a `load` change for each deployment whose figures (not merely the time) changed.
/// Returns the deployments announced.
#[instrument(skip_all, fields(readings = readings.len()))]
pub async fn write_round(
    conn: &mut PgConnection,
    readings: &[Reading],
) -> Result<Vec<Uuid>, sqlx::Error> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let ids: Vec<Uuid> = readings.iter().map(|r| r.deployment_id).collect();
    let projects: Vec<Uuid> = readings.iter().map(|r| r.project_id).collect();
    let tracks: Vec<&str> = readings.iter().map(|r| r.scope.name()).collect();
    let loads: Vec<Json<&Load>> = readings.iter().map(|r| Json(&r.load)).collect();
    // Every CTE reads the statement's snapshot, so `old` holds the loads before this write.
    let changed: Vec<(Uuid, Uuid)> = sqlx::query_as(
        r#"with incoming as (
               select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[])
                   as t(deployment_id, project_id, track, load)),
           old as (
               select l.deployment_id, l.track, l.load from deployment_load l
               join incoming i using (deployment_id, track)),
           written as (
               insert into deployment_load (deployment_id, track, load)
               select deployment_id, track, load from incoming
               on conflict (deployment_id, track) do update set load = excluded.load)
           select distinct i.deployment_id, i.project_id from incoming i
           left join old o using (deployment_id, track)
           where o.load is null or (o.load - 'asOf') is distinct from (i.load - 'asOf')"#,
    )
    .bind(&ids)
    .bind(&projects)
    .bind(&tracks)
    .bind(&loads)
    .fetch_all(&mut *tx)
    .await?;

    insert_samples(&mut tx, Resolution::Fine, readings).await?;

    if !changed.is_empty() {
        // As the feed's triggers do: the lock, held from here to the end of the commit,
        // keeps sequence numbers in commit order (see the change-feed migration).
        sqlx::query("select pg_advisory_xact_lock(7254017193841)")
            .execute(&mut *tx)
            .await?;
        let (deployments, projects): (Vec<Uuid>, Vec<Uuid>) = changed.iter().copied().unzip();
        sqlx::query(
            r#"with added as (
                   insert into deployment_change (project_id, deployment_id, kind)
                   select p, d, 'load' from unnest($1::uuid[], $2::uuid[]) as t(p, d)
                   returning seq)
               select pg_notify('modelplane_changes', max(seq)::text) from added"#,
        )
        .bind(&projects)
        .bind(&deployments)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(changed.into_iter().map(|(d, _)| d).collect())
}

async fn insert_samples(
    conn: &mut PgConnection,
    resolution: Resolution,
    readings: &[Reading],
) -> Result<(), sqlx::Error> {
    let rows: Vec<(&Reading, &LoadSample)> = readings
        .iter()
        .filter_map(|r| r.sample.as_ref().map(|s| (r, s)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&LoadFigures) -> Option<f64>| -> Vec<Option<f32>> {
        rows.iter()
            .map(|(_, s)| f(&s.figures).map(|v| v as f32))
            .collect()
    };
    let sql = format!(
        "insert into {} (deployment_id, project_id, track, at, replicas,
             requests_per_second, prompt_tokens_per_second, generation_tokens_per_second,
             ttft_p50_seconds, ttft_p95_seconds, inter_token_latency_p50_seconds,
             e2e_latency_p95_seconds, waiting, running, kv_cache_usage, error_rate)
         select * from unnest($1::uuid[], $2::uuid[], $3::smallint[], $4::timestamptz[],
             $5::smallint[], $6::real[], $7::real[], $8::real[], $9::real[], $10::real[],
             $11::real[], $12::real[], $13::real[], $14::real[], $15::real[], $16::real[])
         on conflict (deployment_id, track, at) do nothing",
        resolution.table()
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(
            rows.iter()
                .map(|(r, _)| r.deployment_id)
                .collect::<Vec<_>>(),
        )
        .bind(rows.iter().map(|(r, _)| r.project_id).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.scope.code()).collect::<Vec<_>>())
        .bind(rows.iter().map(|(_, s)| s.at).collect::<Vec<_>>())
        .bind(
            rows.iter()
                .map(|(_, s)| s.replicas.clamp(0, i16::MAX as i64) as i16)
                .collect::<Vec<_>>(),
        )
        .bind(column(|f| f.requests_per_second))
        .bind(column(|f| f.prompt_tokens_per_second))
        .bind(column(|f| f.generation_tokens_per_second))
        .bind(column(|f| f.ttft_p50_seconds))
        .bind(column(|f| f.ttft_p95_seconds))
        .bind(column(|f| f.inter_token_latency_p50_seconds))
        .bind(column(|f| f.e2e_latency_p95_seconds))
        .bind(column(|f| f.waiting))
        .bind(column(|f| f.running))
        .bind(column(|f| f.kv_cache_usage))
        .bind(column(|f| f.error_rate))
        .execute(conn)
        .await?;
    Ok(())
}

/// The current loads of `deployments`: per deployment, the whole one and the canary track's.
#[instrument(skip_all, fields(deployments = deployments.len()))]
pub async fn current(
    db: impl PgExecutor<'_>,
    deployments: &[Uuid],
) -> Result<HashMap<Uuid, CurrentLoad>, sqlx::Error> {
    let rows: Vec<(Uuid, String, Json<Load>)> = sqlx::query_as(
        "select deployment_id, track, load from deployment_load
         where deployment_id = any($1) and track in ('all', 'canary')",
    )
    .bind(deployments)
    .fetch_all(db)
    .await?;
    let mut out: HashMap<Uuid, CurrentLoad> = HashMap::new();
    for (id, track, Json(load)) in rows {
        let entry = out.entry(id).or_default();
        if track == "canary" {
            entry.canary = Some(load);
        } else {
            entry.all = Some(load);
        }
    }
    Ok(out)
}

/// A deployment's current load, whole and of its canary track.
#[derive(Debug, Clone, Default)]
pub struct CurrentLoad {
    pub all: Option<Load>,
    pub canary: Option<Load>,
}

/// One step of a series: the aggregate of the samples in it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Step {
    pub bucket: DateTime<Utc>,
    pub replicas: Option<f64>,
    pub requests_per_second: Option<f64>,
    pub prompt_tokens_per_second: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub ttft_p50_seconds: Option<f64>,
    pub ttft_p95_seconds: Option<f64>,
    pub inter_token_latency_p50_seconds: Option<f64>,
    pub e2e_latency_p95_seconds: Option<f64>,
    pub waiting: Option<f64>,
    pub running: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub error_rate: Option<f64>,
}

/// A deployment's samples in `[from, to)`, aggregated per `step`: rates and gauges
/// averaged, medians averaged, 95th percentiles the highest (a conservative bound: a
/// percentile of percentiles is not a percentile), replicas the most. `Track(Stable)`
/// reads the whole deployment where there was no canary.
#[instrument(skip(db))]
pub async fn deployment_series(
    db: impl PgExecutor<'_>,
    resolution: Resolution,
    deployment: Uuid,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
) -> Result<Vec<Step>, sqlx::Error> {
    let table = resolution.table();
    let sql = format!(
        "select date_bin(make_interval(secs => $5), at, timestamptz 'epoch') as bucket,
                max(replicas)::float8 as replicas,
                avg(requests_per_second)::float8 as requests_per_second,
                avg(prompt_tokens_per_second)::float8 as prompt_tokens_per_second,
                avg(generation_tokens_per_second)::float8 as generation_tokens_per_second,
                avg(ttft_p50_seconds)::float8 as ttft_p50_seconds,
                max(ttft_p95_seconds)::float8 as ttft_p95_seconds,
                avg(inter_token_latency_p50_seconds)::float8 as inter_token_latency_p50_seconds,
                max(e2e_latency_p95_seconds)::float8 as e2e_latency_p95_seconds,
                avg(waiting)::float8 as waiting,
                avg(running)::float8 as running,
                avg(kv_cache_usage)::float8 as kv_cache_usage,
                avg(error_rate)::float8 as error_rate
         from {table} s
         where deployment_id = $1 and at >= $3 and at < $4
           and (track = $2 or ($2 = 1 and track = 0 and not exists (
                select 1 from {table} t
                where t.deployment_id = $1 and t.track = 1 and t.at = s.at)))
         group by 1 order by 1"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(deployment)
        .bind(scope.code())
        .bind(from)
        .bind(to)
        .bind(step.as_secs_f64())
        .fetch_all(db)
        .await
}

/// A project's samples in `[from, to)` per `step`, summed over its deployments: rates,
/// queues and replicas added, KV-cache use averaged, medians and error rates weighted by
/// each deployment's requests, 95th percentiles the highest deployment's.
#[instrument(skip(db))]
pub async fn project_series(
    db: impl PgExecutor<'_>,
    resolution: Resolution,
    project: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
) -> Result<Vec<Step>, sqlx::Error> {
    let table = resolution.table();
    let sql = format!(
        "with per as (
             select deployment_id,
                    date_bin(make_interval(secs => $4), at, timestamptz 'epoch') as bucket,
                    max(replicas)::float8 as replicas,
                    avg(requests_per_second)::float8 as rps,
                    avg(prompt_tokens_per_second)::float8 as prompt,
                    avg(generation_tokens_per_second)::float8 as generation,
                    avg(ttft_p50_seconds)::float8 as ttft50,
                    max(ttft_p95_seconds)::float8 as ttft95,
                    avg(inter_token_latency_p50_seconds)::float8 as itl50,
                    max(e2e_latency_p95_seconds)::float8 as e2e95,
                    avg(waiting)::float8 as waiting,
                    avg(running)::float8 as running,
                    avg(kv_cache_usage)::float8 as kv,
                    avg(error_rate)::float8 as errors
             from {table}
             where project_id = $1 and track = 0 and at >= $2 and at < $3
             group by 1, 2)
         select bucket,
                sum(replicas) as replicas,
                sum(rps) as requests_per_second,
                sum(prompt) as prompt_tokens_per_second,
                sum(generation) as generation_tokens_per_second,
                sum(ttft50 * rps) / nullif(sum(rps) filter (where ttft50 is not null), 0)
                    as ttft_p50_seconds,
                max(ttft95) as ttft_p95_seconds,
                sum(itl50 * rps) / nullif(sum(rps) filter (where itl50 is not null), 0)
                    as inter_token_latency_p50_seconds,
                max(e2e95) as e2e_latency_p95_seconds,
                sum(waiting) as waiting,
                sum(running) as running,
                avg(kv) as kv_cache_usage,
                sum(errors * rps) / nullif(sum(rps) filter (where errors is not null), 0)
                    as error_rate
         from per group by bucket order by bucket"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(project)
        .bind(from)
        .bind(to)
        .bind(step.as_secs_f64())
        .fetch_all(db)
        .await
}

/// The oldest fine sample kept (the fine series answers windows that start after it).
pub async fn oldest_fine(db: impl PgExecutor<'_>) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("select min(at) from load_sample_fine")
        .fetch_one(db)
        .await
}

/// The newest coarse bucket written, to resume rolling up from.
pub async fn newest_coarse(db: impl PgExecutor<'_>) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("select max(at) from load_sample_coarse")
        .fetch_one(db)
        .await
}

/// Rolls the fine samples in `[from, to)` up into 5-minute coarse samples (`from` and `to`
/// on 5-minute boundaries); rolling a bucket again replaces it. Returns the rows written.
#[instrument(skip(db))]
pub async fn roll_up(
    db: impl PgExecutor<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "insert into load_sample_coarse (deployment_id, project_id, track, at, replicas,
             requests_per_second, prompt_tokens_per_second, generation_tokens_per_second,
             ttft_p50_seconds, ttft_p95_seconds, inter_token_latency_p50_seconds,
             e2e_latency_p95_seconds, waiting, running, kv_cache_usage, error_rate)
         select deployment_id, project_id, track,
                date_bin(interval '5 minutes', at, timestamptz 'epoch'),
                max(replicas), avg(requests_per_second), avg(prompt_tokens_per_second),
                avg(generation_tokens_per_second), avg(ttft_p50_seconds), max(ttft_p95_seconds),
                avg(inter_token_latency_p50_seconds), max(e2e_latency_p95_seconds),
                avg(waiting), avg(running), avg(kv_cache_usage), avg(error_rate)
         from load_sample_fine where at >= $1 and at < $2
         group by deployment_id, project_id, track, 4
         on conflict (deployment_id, track, at) do update set
             replicas = excluded.replicas,
             requests_per_second = excluded.requests_per_second,
             prompt_tokens_per_second = excluded.prompt_tokens_per_second,
             generation_tokens_per_second = excluded.generation_tokens_per_second,
             ttft_p50_seconds = excluded.ttft_p50_seconds,
             ttft_p95_seconds = excluded.ttft_p95_seconds,
             inter_token_latency_p50_seconds = excluded.inter_token_latency_p50_seconds,
             e2e_latency_p95_seconds = excluded.e2e_latency_p95_seconds,
             waiting = excluded.waiting, running = excluded.running,
             kv_cache_usage = excluded.kv_cache_usage, error_rate = excluded.error_rate",
    )
    .bind(from)
    .bind(to)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes fine samples older than `fine`, coarse ones older than `coarse`, and the
/// current loads of deployments that are gone. Returns the rows deleted.
#[instrument(skip(db))]
pub async fn prune(
    db: &mut PgConnection,
    fine: DateTime<Utc>,
    coarse: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    deleted += sqlx::query("delete from load_sample_fine where at < $1")
        .bind(fine)
        .execute(&mut *db)
        .await?
        .rows_affected();
    deleted += sqlx::query("delete from load_sample_coarse where at < $1")
        .bind(coarse)
        .execute(&mut *db)
        .await?
        .rows_affected();
    deleted += sqlx::query(
        "delete from deployment_load l
         where not exists (select 1 from model_deployment d where d.id = l.deployment_id)
            or (l.track <> 'all' and not exists (
                select 1 from model_deployment d
                where d.id = l.deployment_id and d.canary is not null))",
    )
    .execute(&mut *db)
    .await?
    .rows_affected();
    // Load changes are the newest reading, not history: an hour is plenty to resume from.
    deleted += sqlx::query(
        "delete from deployment_change where kind = 'load' and created_at < now() - interval '1 hour'",
    )
    .execute(&mut *db)
    .await?
    .rows_affected();
    Ok(deleted)
}

/// Rows and bytes the series tables hold, for the README's cost figures and the bench.
pub async fn footprint(db: impl PgExecutor<'_>) -> Result<(i64, i64, i64, i64), sqlx::Error> {
    sqlx::query_as(
        "select (select count(*) from load_sample_fine),
                pg_total_relation_size('load_sample_fine'),
                (select count(*) from load_sample_coarse),
                pg_total_relation_size('load_sample_coarse')",
    )
    .fetch_one(db)
    .await
}

/// A deployment the worker reads the load of.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Target {
    pub id: Uuid,
    pub project_id: Uuid,
    /// `spec.engine.kind` (`vllm` when the spec leaves it out, as its default).
    pub engine: String,
    /// The deployment has a canary track: its tracks are read apart too.
    pub has_canary: bool,
}

/// Every deployment not being deleted: each gets a reading per round, pods or none.
pub async fn targets(db: impl PgExecutor<'_>) -> Result<Vec<Target>, sqlx::Error> {
    sqlx::query_as(
        "select id, project_id, coalesce(spec -> 'engine' ->> 'kind', 'vllm') as engine,
                canary is not null as has_canary
         from model_deployment where deletion_requested_at is null",
    )
    .fetch_all(db)
    .await
}

//! The `model_key` table: credentials for calling a project's models. Secrets are stored
//! only as SHA-256 hashes.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::ModelKey;

/// The channel the table's trigger notifies with a changed key's id.
pub const CHANNEL: &str = "modelplane_model_keys";

/// A new key's fields, for [`insert`].
pub struct NewKey<'a> {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: &'a str,
    pub prefix: &'a str,
    pub key_hash: &'a str,
    pub deployments: Option<&'a [String]>,
    pub requests_per_minute: Option<i32>,
    pub daily_token_budget: Option<i64>,
    pub max_concurrent: Option<i32>,
    pub created_by: &'a str,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A key as the check needs it: what it may call and how often, and where.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyGrant {
    pub id: Uuid,
    pub key_hash: String,
    pub name: String,
    pub project_id: Uuid,
    pub project: String,
    /// The deployments it may call, by name; `None`: every deployment of the project.
    pub deployments: Option<Vec<String>>,
    pub requests_per_minute: Option<i32>,
    pub daily_token_budget: Option<i64>,
    pub max_concurrent: Option<i32>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    project: String,
    name: String,
    prefix: String,
    deployments: Option<Vec<String>>,
    requests_per_minute: Option<i32>,
    daily_token_budget: Option<i64>,
    max_concurrent: Option<i32>,
    created_by: String,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    last_used_at: Option<DateTime<Utc>>,
}

impl From<Row> for ModelKey {
    fn from(r: Row) -> Self {
        Self {
            id: r.id,
            project: r.project,
            name: r.name,
            prefix: r.prefix,
            deployments: r.deployments,
            requests_per_minute: r.requests_per_minute,
            daily_token_budget: r.daily_token_budget,
            max_concurrent: r.max_concurrent,
            created_by: r.created_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
            last_used_at: r.last_used_at,
        }
    }
}

/// The columns of a listed key, `k` being `model_key` (a macro: sqlx takes only literal SQL).
macro_rules! listed {
    () => {
        "k.id, (select name from project where id = k.project_id) as project, k.name, k.prefix,
         k.deployments, k.requests_per_minute, k.daily_token_budget, k.max_concurrent,
         k.created_by, k.created_at,
         k.expires_at, k.revoked_at, k.last_used_at"
    };
}

/// The columns of a key's grant, `k` being `model_key` joined to its project `p`.
macro_rules! granted {
    () => {
        "k.id, k.key_hash, k.name, k.project_id, p.name as project, k.deployments,
         k.requests_per_minute, k.daily_token_budget, k.max_concurrent, k.expires_at,
         k.revoked_at, k.last_used_at
         from model_key k join project p on p.id = k.project_id"
    };
}

#[instrument(skip(db, key), fields(key_id = %key.id, name = key.name))]
pub async fn insert(db: impl PgExecutor<'_>, key: NewKey<'_>) -> Result<ModelKey, sqlx::Error> {
    let row: Row = sqlx::query_as(concat!(
        "insert into model_key as k (id, project_id, name, prefix, key_hash, deployments,
                requests_per_minute, daily_token_budget, max_concurrent, created_by, expires_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         returning ",
        listed!()
    ))
    .bind(key.id)
    .bind(key.project_id)
    .bind(key.name)
    .bind(key.prefix)
    .bind(key.key_hash)
    .bind(key.deployments)
    .bind(key.requests_per_minute)
    .bind(key.daily_token_budget)
    .bind(key.max_concurrent)
    .bind(key.created_by)
    .bind(key.expires_at)
    .fetch_one(db)
    .await?;
    Ok(row.into())
}

/// Keys of a project, newest first; only live ones (neither revoked nor expired) when asked.
#[instrument(skip(db))]
pub async fn list(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    live_only: bool,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ModelKey>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "select ",
        listed!(),
        " from model_key k
         where k.project_id = $1
           and (not $2 or (k.revoked_at is null and (k.expires_at is null or k.expires_at > now())))
           and ($3::uuid is null or k.id < $3)
         order by k.id desc
         limit $4"
    ))
    .bind(project_id)
    .bind(live_only)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// One key of a project.
#[instrument(skip(db))]
pub async fn get(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    id: Uuid,
) -> Result<Option<ModelKey>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(concat!(
        "select ",
        listed!(),
        " from model_key k where k.project_id = $1 and k.id = $2"
    ))
    .bind(project_id)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Into::into))
}

/// Revokes a live key of the project; returns it when it was live.
#[instrument(skip(db))]
pub async fn revoke(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    id: Uuid,
) -> Result<Option<ModelKey>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(concat!(
        "update model_key k set revoked_at = now()
         where k.project_id = $1 and k.id = $2 and k.revoked_at is null
         returning ",
        listed!()
    ))
    .bind(project_id)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(Into::into))
}

/// Every key that may still work (neither revoked nor expired): what the check's cache
/// starts from.
#[instrument(skip(db))]
pub async fn live_grants(db: impl PgExecutor<'_>) -> Result<Vec<KeyGrant>, sqlx::Error> {
    sqlx::query_as(concat!(
        "select ",
        granted!(),
        " where k.revoked_at is null and (k.expires_at is null or k.expires_at > now())"
    ))
    .fetch_all(db)
    .await
}

/// One key's grant, live or not (`None`: no such key).
#[instrument(skip(db))]
pub async fn grant(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<KeyGrant>, sqlx::Error> {
    sqlx::query_as(concat!("select ", granted!(), " where k.id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Records use of the keys `ids` (at most once a minute each: the check calls it in batches).
#[instrument(skip(db))]
pub async fn touch(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update model_key set last_used_at = now()
         where id = any($1) and (last_used_at is null or last_used_at < now() - interval '1 minute')",
    )
    .bind(ids)
    .execute(db)
    .await?;
    Ok(())
}

/// Which of `names` are deployments of the project (not being deleted).
#[instrument(skip(db))]
pub async fn existing_deployments(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    names: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select name from model_deployment
         where project_id = $1 and name = any($2) and deletion_requested_at is null",
    )
    .bind(project_id)
    .bind(names)
    .fetch_all(db)
    .await
}

/// Deployment `id` as the key check needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentOf {
    pub project_id: Uuid,
    pub name: String,
    /// The 95th percentile of its requests' latency at the last reading of its metrics.
    pub e2e_p95_seconds: Option<f64>,
}

/// The project, name and request latency of deployment `id`, for the key check.
#[instrument(skip(db))]
pub async fn deployment_of(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<DeploymentOf>, sqlx::Error> {
    sqlx::query_as(
        "select d.project_id, d.name,
                (select (l.load ->> 'e2eLatencyP95Seconds')::float8 from deployment_load l
                 where l.deployment_id = d.id and l.track = 'all') as e2e_p95_seconds
         from model_deployment d where d.id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// The 95th-percentile latency of deployments `ids` at their last reading (those read).
#[instrument(skip(db, ids), fields(deployments = ids.len()))]
pub async fn latencies(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, Option<f64>)>, sqlx::Error> {
    sqlx::query_as(
        "select deployment_id, (load ->> 'e2eLatencyP95Seconds')::float8 from deployment_load
         where deployment_id = any($1) and track = 'all'",
    )
    .bind(ids)
    .fetch_all(db)
    .await
}

/// Requests a process let through for one key in one minute.
#[derive(Debug, Clone)]
pub struct Counted {
    pub key_id: Uuid,
    pub deployment_id: Uuid,
    pub minute: DateTime<Utc>,
    pub requests: i64,
}

/// Adds `counted` to the keys' minutes (and marks them used), then returns every
/// process's count in minute `at` of the keys `limited`.
#[instrument(skip_all, fields(rows = counted.len()))]
pub async fn count_requests(
    db: &sqlx::PgPool,
    counted: &[Counted],
    at: DateTime<Utc>,
    limited: &[Uuid],
) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    let ids: Vec<Uuid> = counted.iter().map(|c| c.key_id).collect();
    let deployments: Vec<Uuid> = counted.iter().map(|c| c.deployment_id).collect();
    let minutes: Vec<DateTime<Utc>> = counted.iter().map(|c| c.minute).collect();
    let requests: Vec<i64> = counted.iter().map(|c| c.requests).collect();
    let mut tx = db.begin().await?;
    // Keys deleted meanwhile (their project gone) are skipped, not an error.
    sqlx::query(
        "insert into model_key_usage (key_id, deployment_id, minute, requests)
         select u.key_id, u.deployment_id, u.minute, u.requests
         from unnest($1::uuid[], $4::uuid[], $2::timestamptz[], $3::bigint[])
             as u (key_id, deployment_id, minute, requests)
         where exists (select 1 from model_key k where k.id = u.key_id)
         on conflict (key_id, minute, deployment_id) do update
             set requests = model_key_usage.requests + excluded.requests",
    )
    .bind(&ids)
    .bind(&minutes)
    .bind(&requests)
    .bind(&deployments)
    .execute(&mut *tx)
    .await?;
    touch(&mut *tx, &ids).await?;
    let totals = sqlx::query_as(
        "select key_id, sum(requests)::bigint from model_key_usage
         where minute = $1 and key_id = any($2)
         group by key_id",
    )
    .bind(at)
    .bind(limited)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(totals)
}

/// Where a deployment's route sits: its id, hostname and effective path prefix.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RouteAt {
    pub id: Uuid,
    pub hostname: Option<String>,
    pub path: String,
}

/// Every deployment's route (the key check's gRPC protocol finds the deployment asked for
/// from the request's host and path).
#[instrument(skip(db))]
pub async fn routes(db: impl PgExecutor<'_>) -> Result<Vec<RouteAt>, sqlx::Error> {
    sqlx::query_as(
        "select id, route_hostname as hostname, route_path as path from model_deployment
         where deletion_requested_at is null",
    )
    .fetch_all(db)
    .await
}

/// Requests and tokens of a key on one deployment and UTC day (`key_tokens` in the
/// migrations: the deployment's metered tokens shared among the keys that called it).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyDay {
    pub key_id: Uuid,
    pub deployment_id: Uuid,
    /// Its name, while it exists.
    pub deployment: Option<String>,
    pub day: chrono::NaiveDate,
    pub requests: i64,
    pub tokens: f64,
}

/// What keys `ids` used per deployment and UTC day in `[since, until)`.
#[instrument(skip(db, ids), fields(keys = ids.len()))]
pub async fn key_days(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Vec<KeyDay>, sqlx::Error> {
    sqlx::query_as(
        "select t.key_id, t.deployment_id, d.name as deployment, t.day, t.requests, t.tokens
         from key_tokens($1, $2, $3) t left join model_deployment d on d.id = t.deployment_id
         order by t.day, t.deployment_id",
    )
    .bind(ids)
    .bind(since)
    .bind(until)
    .fetch_all(db)
    .await
}

/// A project's deployments' metered tokens and its keys' requests per UTC day in
/// `[since, until)`: `(day, requests, tokens)`.
#[instrument(skip(db))]
pub async fn project_days(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Vec<(chrono::NaiveDate, i64, f64)>, sqlx::Error> {
    sqlx::query_as(
        "with calls as (
             select (u.minute at time zone 'UTC')::date as day, sum(u.requests)::bigint as requests
             from model_key_usage u join model_key k on k.id = u.key_id
             where k.project_id = $1 and u.minute >= $2 and u.minute < $3
             group by 1),
         metered as (
             select t.day, sum(t.tokens)::float8 as tokens
             from deployment_tokens(
                 array(select id from model_deployment where project_id = $1), $2, $3) t
             group by 1)
         select coalesce(c.day, m.day) as day, coalesce(c.requests, 0), coalesce(m.tokens, 0)
         from calls c full join metered m on m.day = c.day
         order by 1",
    )
    .bind(project_id)
    .bind(since)
    .bind(until)
    .fetch_all(db)
    .await
}

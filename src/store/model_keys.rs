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
         k.deployments, k.requests_per_minute, k.daily_token_budget, k.created_by, k.created_at,
         k.expires_at, k.revoked_at, k.last_used_at"
    };
}

/// The columns of a key's grant, `k` being `model_key` joined to its project `p`.
macro_rules! granted {
    () => {
        "k.id, k.key_hash, k.name, k.project_id, p.name as project, k.deployments,
         k.requests_per_minute, k.daily_token_budget, k.expires_at, k.revoked_at, k.last_used_at
         from model_key k join project p on p.id = k.project_id"
    };
}

#[instrument(skip(db, key), fields(key_id = %key.id, name = key.name))]
pub async fn insert(db: impl PgExecutor<'_>, key: NewKey<'_>) -> Result<ModelKey, sqlx::Error> {
    let row: Row = sqlx::query_as(concat!(
        "insert into model_key as k (id, project_id, name, prefix, key_hash, deployments,
                requests_per_minute, daily_token_budget, created_by, expires_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
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

/// The project and name of deployment `id`, for the key check.
#[instrument(skip(db))]
pub async fn deployment_of(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<(Uuid, String)>, sqlx::Error> {
    sqlx::query_as("select project_id, name from model_deployment where id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Requests a process let through for one key in one minute.
#[derive(Debug, Clone)]
pub struct Counted {
    pub key_id: Uuid,
    pub minute: DateTime<Utc>,
    pub requests: i64,
}

/// Adds `counted` to the keys' minutes (and marks them used), then returns every
/// process's count in minute `at` of the keys `limited` and of those counted.
#[instrument(skip_all, fields(rows = counted.len()))]
pub async fn count_requests(
    db: &sqlx::PgPool,
    counted: &[Counted],
    at: DateTime<Utc>,
    limited: &[Uuid],
) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    let ids: Vec<Uuid> = counted.iter().map(|c| c.key_id).collect();
    let minutes: Vec<DateTime<Utc>> = counted.iter().map(|c| c.minute).collect();
    let requests: Vec<i64> = counted.iter().map(|c| c.requests).collect();
    let mut tx = db.begin().await?;
    // Keys deleted meanwhile (their project gone) are skipped, not an error.
    sqlx::query(
        "insert into model_key_usage (key_id, minute, requests)
         select u.key_id, u.minute, u.requests
         from unnest($1::uuid[], $2::timestamptz[], $3::bigint[]) as u (key_id, minute, requests)
         where exists (select 1 from model_key k where k.id = u.key_id)
         on conflict (key_id, minute) do update
             set requests = model_key_usage.requests + excluded.requests",
    )
    .bind(&ids)
    .bind(&minutes)
    .bind(&requests)
    .execute(&mut *tx)
    .await?;
    touch(&mut *tx, &ids).await?;
    let totals = sqlx::query_as(
        "select key_id, requests from model_key_usage
         where minute = $1 and (key_id = any($2) or key_id = any($3))",
    )
    .bind(at)
    .bind(limited)
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(totals)
}

/// Requests key `id` was let through, per UTC day from `from` to `to` (days without any
/// left out).
#[instrument(skip(db))]
pub async fn requests_by_day(
    db: impl PgExecutor<'_>,
    id: Uuid,
    from: chrono::NaiveDate,
    to: chrono::NaiveDate,
) -> Result<Vec<(chrono::NaiveDate, i64)>, sqlx::Error> {
    sqlx::query_as(
        "select (minute at time zone 'UTC')::date as day, sum(requests)::bigint
         from model_key_usage
         where key_id = $1
           and minute >= ($2::date)::timestamp at time zone 'UTC'
           and minute < ($3::date + 1)::timestamp at time zone 'UTC'
         group by day
         order by day",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await
}

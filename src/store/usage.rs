//! The `gpu_usage` table: intervals of GPUs held by a deployment's ready pods.

use chrono::NaiveDate;
use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

/// GPUs held by one track's ready pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// `stable` or `canary`; a disaggregated deployment's `prefill` or `decode`.
    pub track: &'static str,
    pub resource_name: String,
    pub product: Option<String>,
    pub gpus: i64,
}

/// Ends the deployment's open intervals now and opens one per entry of `held` (none: the
/// deployment holds no GPUs from now on). The deployment's row must still exist to open
/// intervals (they belong to its project).
#[instrument(skip(db, held))]
pub async fn record_held(
    db: impl PgExecutor<'_>,
    deployment_id: Uuid,
    deployment_name: &str,
    held: &[Held],
) -> Result<(), sqlx::Error> {
    let tracks: Vec<&str> = held.iter().map(|h| h.track).collect();
    let resources: Vec<&str> = held.iter().map(|h| h.resource_name.as_str()).collect();
    let products: Vec<&str> = held
        .iter()
        .map(|h| h.product.as_deref().unwrap_or(""))
        .collect();
    let gpus: Vec<i64> = held.iter().map(|h| h.gpus).collect();
    sqlx::query!(
        "with closed as (
             update gpu_usage set ended_at = greatest(started_at, now())
             where deployment_id = $1 and ended_at is null
         )
         insert into gpu_usage (project_id, deployment_id, deployment_name, track,
                                resource_name, product, gpus, started_at)
         select d.project_id, $1, $2, t, r, p, g, now()
         from unnest($3::text[], $4::text[], $5::text[], $6::bigint[]) as h(t, r, p, g)
         join model_deployment d on d.id = $1
         where g > 0",
        deployment_id,
        deployment_name,
        &tracks as &[&str],
        &resources as &[&str],
        &products as &[&str],
        &gpus
    )
    .execute(db)
    .await?;
    Ok(())
}

/// GPU-hours per UTC day, deployment and GPU kind, from `from` to `to` inclusive (a row
/// only where there was use).
#[derive(Debug, Clone)]
pub struct UsageRow {
    pub day: NaiveDate,
    pub deployment_name: String,
    /// `prefill` or `decode` for a role of a disaggregated deployment; `None` for the rest
    /// (a deployment's own pods and its canary's together).
    pub role: Option<String>,
    pub resource_name: String,
    pub product: Option<String>,
    pub gpu_hours: f64,
}

#[instrument(skip(db))]
pub async fn usage_by_day(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<Vec<UsageRow>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"with day as (
               select d::date as day, d at time zone 'UTC' as starts,
                      (d + interval '1 day') at time zone 'UTC' as ends
               from generate_series($2::date::timestamp, $3::date::timestamp, interval '1 day') d
           )
           select day.day as "day!", u.deployment_name,
                  case when u.track in ('prefill', 'decode') then u.track end as role,
                  u.resource_name, u.product,
                  sum(u.gpus * extract(epoch from
                        least(coalesce(u.ended_at, now()), day.ends) - greatest(u.started_at, day.starts)
                  ))::float8 / 3600.0 as "gpu_hours!"
           from day
           join gpu_usage u on u.project_id = $1
                and u.started_at < day.ends and coalesce(u.ended_at, now()) > day.starts
           group by day.day, u.deployment_name, role, u.resource_name, u.product
           order by day.day, u.deployment_name, role"#,
        project_id,
        from,
        to
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| UsageRow {
            day: r.day,
            deployment_name: r.deployment_name,
            role: r.role,
            resource_name: r.resource_name,
            product: Some(r.product).filter(|p| !p.is_empty()),
            gpu_hours: r.gpu_hours,
        })
        .collect())
}

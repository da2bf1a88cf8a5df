//! The `project_quota` table.

use sqlx::PgExecutor;
use sqlx::types::Json;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::{GpuQuota, QuotaSpec};

/// The project's quota, locked for the rest of the transaction so concurrent changes of
/// the project are checked one after the other. `None` (and no lock): no quota.
#[instrument(skip(db))]
pub async fn lock_quota(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
) -> Result<Option<QuotaSpec>, sqlx::Error> {
    let row = sqlx::query!(
        r#"select replicas, gpus as "gpus: Json<Vec<GpuQuota>>" from project_quota
           where project_id = $1 for update"#,
        project_id
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| QuotaSpec {
        replicas: r.replicas,
        gpus: r.gpus.0,
    }))
}

#[instrument(skip(db))]
pub async fn find_quota(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
) -> Result<Option<QuotaSpec>, sqlx::Error> {
    let row = sqlx::query!(
        r#"select replicas, gpus as "gpus: Json<Vec<GpuQuota>>" from project_quota
           where project_id = $1"#,
        project_id
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| QuotaSpec {
        replicas: r.replicas,
        gpus: r.gpus.0,
    }))
}

#[instrument(skip(db, quota))]
pub async fn upsert_quota(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    quota: &QuotaSpec,
    actor: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into project_quota (project_id, replicas, gpus, updated_by) values ($1, $2, $3, $4)
         on conflict (project_id) do update set
             replicas = excluded.replicas, gpus = excluded.gpus,
             updated_by = excluded.updated_by, updated_at = now()",
        project_id,
        quota.replicas,
        Json(&quota.gpus) as _,
        actor
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Removes the project's quota; whether it had one.
#[instrument(skip(db))]
pub async fn delete_quota(db: impl PgExecutor<'_>, project_id: Uuid) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "delete from project_quota where project_id = $1",
        project_id
    )
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

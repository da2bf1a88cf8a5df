//! The `reconcile_work` table: Postgres as the reconciler's queue.
//!
//! Enqueuing is an upsert plus `pg_notify`, so a sleeping worker wakes as soon as the
//! surrounding transaction commits (notifications are delivered on commit).

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

/// The channel workers `LISTEN` on; the payload is the deployment id.
pub const NOTIFY_CHANNEL: &str = "modelplane_reconcile";

#[instrument(skip(db))]
pub async fn enqueue_reconcile(
    db: impl PgExecutor<'_>,
    deployment_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "with queued as (
             insert into reconcile_work (deployment_id) values ($1)
             on conflict (deployment_id) do update
                 set run_after = now(), attempts = 0, enqueued_at = now()
             returning deployment_id
         )
         select pg_notify('modelplane_reconcile', deployment_id::text) from queued",
        deployment_id
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// Number of queued items, for metrics and tests.
#[instrument(skip(db))]
pub async fn count_queued(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    let count = sqlx::query_scalar!(r#"select count(*) as "count!" from reconcile_work"#)
        .fetch_one(db)
        .await?;
    Ok(count)
}

/// Whether a work item is queued for the deployment.
#[instrument(skip(db))]
pub async fn is_queued(db: impl PgExecutor<'_>, deployment_id: Uuid) -> Result<bool, sqlx::Error> {
    let found = sqlx::query_scalar!(
        r#"select exists(select 1 from reconcile_work where deployment_id = $1) as "found!""#,
        deployment_id
    )
    .fetch_one(db)
    .await?;
    Ok(found)
}

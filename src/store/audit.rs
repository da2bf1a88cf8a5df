//! The `audit_event` table: changes to projects, tokens and role bindings.

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::AuditEvent;

#[instrument(skip(db, message))]
pub async fn insert_audit_event(
    db: impl PgExecutor<'_>,
    project_id: Option<Uuid>,
    kind: &str,
    target: &str,
    message: &str,
    actor: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into audit_event (project_id, kind, target, message, actor) values ($1, $2, $3, $4, $5)",
        project_id,
        kind,
        target,
        message,
        actor
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Oldest first, after `after` when paging; `None` lists platform-level events.
#[instrument(skip(db))]
pub async fn list_audit_events(
    db: impl PgExecutor<'_>,
    project_id: Option<Uuid>,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEvent>, sqlx::Error> {
    sqlx::query_as!(
        AuditEvent,
        "select id, kind, target, message, actor, created_at from audit_event
         where project_id is not distinct from $1 and ($2::bigint is null or id > $2)
         order by id limit $3",
        project_id,
        after,
        limit
    )
    .fetch_all(db)
    .await
}

//! The `deployment_event` table: the timeline, kept after a deployment is deleted.

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use super::text::Text;
use crate::domain::{EventKind, TimelineEvent};

/// What happened, for [`insert_event`].
pub struct NewEvent<'a> {
    pub deployment_id: Uuid,
    pub project_id: Uuid,
    pub deployment_name: &'a str,
    pub kind: EventKind,
    pub message: &'a str,
    pub actor: &'a str,
}

/// A timeline entry written by the same statement as the change it tells of, so both commit
/// together (one commit, not two).
#[derive(Debug, Clone, Copy)]
pub struct Note<'a> {
    pub kind: EventKind,
    pub message: &'a str,
    pub actor: &'a str,
}

#[instrument(skip(db, event), fields(deployment_id = %event.deployment_id, kind = event.kind.as_str()))]
pub async fn insert_event(db: impl PgExecutor<'_>, event: NewEvent<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
         values ($1, $2, $3, $4, $5, $6)",
        event.deployment_id,
        event.project_id,
        event.deployment_name,
        event.kind.as_str(),
        event.message,
        event.actor
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Oldest first, after `after` when paging.
#[instrument(skip(db))]
pub async fn list_events(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    deployment_id: Uuid,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<TimelineEvent>, sqlx::Error> {
    sqlx::query_as!(
        TimelineEvent,
        r#"select id, deployment_id, kind as "kind: Text<EventKind>", message, actor, created_at
         from deployment_event
         where project_id = $1 and deployment_id = $2 and ($3::bigint is null or id > $3)
         order by id
         limit $4"#,
        project_id,
        deployment_id,
        after,
        limit
    )
    .fetch_all(db)
    .await
}

/// One timeline entry of `project_id`.
#[instrument(skip(db))]
pub async fn find_event(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    id: i64,
) -> Result<Option<TimelineEvent>, sqlx::Error> {
    sqlx::query_as!(
        TimelineEvent,
        r#"select id, deployment_id, kind as "kind: Text<EventKind>", message, actor, created_at
           from deployment_event where project_id = $1 and id = $2"#,
        project_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// The newest `per` timeline entries of each of `deployment_ids` in `project_id`, newest
/// first: one statement for a whole page of deployments.
#[instrument(skip(db, deployment_ids), fields(deployments = deployment_ids.len()))]
pub async fn latest_events(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    deployment_ids: &[Uuid],
    per: i64,
) -> Result<Vec<TimelineEvent>, sqlx::Error> {
    sqlx::query_as!(
        TimelineEvent,
        r#"select id as "id!", deployment_id as "deployment_id!", kind as "kind!: Text<EventKind>",
                  message as "message!", actor as "actor!", created_at as "created_at!"
           from (select e.*, row_number() over (partition by deployment_id order by id desc) as n
                 from deployment_event e
                 where project_id = $1 and deployment_id = any($2)) ranked
           where n <= $3
           order by deployment_id, id desc"#,
        project_id,
        deployment_ids,
        per
    )
    .fetch_all(db)
    .await
}

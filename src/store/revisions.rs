//! The `deployment_revision` table: every accepted spec, by generation.

use sqlx::PgExecutor;
use sqlx::types::Json;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::{DeploymentSpec, Revision};

#[instrument(skip(db, spec))]
pub async fn insert_revision(
    db: impl PgExecutor<'_>,
    deployment_id: Uuid,
    revision: i64,
    spec: &DeploymentSpec,
    reason: &str,
    actor: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into deployment_revision (deployment_id, revision, spec, reason, actor)
         values ($1, $2, $3, $4, $5)",
        deployment_id,
        revision,
        Json(spec) as _,
        reason,
        actor
    )
    .execute(db)
    .await?;
    Ok(())
}

#[instrument(skip(db))]
pub async fn find_revision(
    db: impl PgExecutor<'_>,
    deployment_id: Uuid,
    revision: i64,
) -> Result<Option<Revision>, sqlx::Error> {
    sqlx::query_as!(
        Revision,
        r#"select revision, spec as "spec: Json<DeploymentSpec>", reason, actor, created_at
           from deployment_revision where deployment_id = $1 and revision = $2"#,
        deployment_id,
        revision
    )
    .fetch_optional(db)
    .await
}

/// The revisions of `deployment_id`, newest first (before `before` when paging); none
/// unless it is `project_id`'s.
#[instrument(skip(db))]
pub async fn list_revisions(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    deployment_id: Uuid,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Revision>, sqlx::Error> {
    sqlx::query_as!(
        Revision,
        r#"select r.revision, r.spec as "spec: Json<DeploymentSpec>", r.reason, r.actor, r.created_at
           from deployment_revision r
           join model_deployment d on d.id = r.deployment_id and d.project_id = $1
           where r.deployment_id = $2 and ($3::bigint is null or r.revision < $3)
           order by r.revision desc
           limit $4"#,
        project_id,
        deployment_id,
        before,
        limit
    )
    .fetch_all(db)
    .await
}

/// Lets `query_as!` decode a JSONB column straight into the domain spec.
impl From<Json<DeploymentSpec>> for DeploymentSpec {
    fn from(json: Json<DeploymentSpec>) -> Self {
        json.0
    }
}

/// How many revisions each of `deployment_ids` (of `project_id`) has: one statement.
#[instrument(skip(db, deployment_ids), fields(deployments = deployment_ids.len()))]
pub async fn revision_counts(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    deployment_ids: &[Uuid],
) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select r.deployment_id, count(*) as "count!"
           from deployment_revision r
           join model_deployment d on d.id = r.deployment_id and d.project_id = $1
           where r.deployment_id = any($2)
           group by r.deployment_id"#,
        project_id,
        deployment_ids
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.deployment_id, r.count))
        .collect())
}

//! The `project` table.

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::Project;

#[instrument(skip(db))]
pub async fn insert_project(
    db: impl PgExecutor<'_>,
    id: Uuid,
    name: &str,
    namespace: &str,
    namespace_adopted: bool,
) -> Result<Project, sqlx::Error> {
    sqlx::query_as!(
        Project,
        "insert into project (id, name, namespace, namespace_adopted)
         values ($1, $2, $3, $4)
         returning id, name, namespace, namespace_adopted, created_at",
        id,
        name,
        namespace,
        namespace_adopted
    )
    .fetch_one(db)
    .await
}

#[instrument(skip(db))]
pub async fn find_project_by_name(
    db: impl PgExecutor<'_>,
    name: &str,
) -> Result<Option<Project>, sqlx::Error> {
    sqlx::query_as!(
        Project,
        "select id, name, namespace, namespace_adopted, created_at from project where name = $1",
        name
    )
    .fetch_optional(db)
    .await
}

#[instrument(skip(db))]
pub async fn find_project_by_id(
    db: impl PgExecutor<'_>,
    id: uuid::Uuid,
) -> Result<Option<Project>, sqlx::Error> {
    sqlx::query_as!(
        Project,
        "select id, name, namespace, namespace_adopted, created_at from project where id = $1",
        id
    )
    .fetch_optional(db)
    .await
}

/// Projects ordered by id (time-ordered UUIDv7), after `after` when paging, and only
/// those in `only` when it is given.
#[instrument(skip(db, only))]
pub async fn list_projects(
    db: impl PgExecutor<'_>,
    only: Option<&[Uuid]>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Project>, sqlx::Error> {
    sqlx::query_as!(
        Project,
        "select id, name, namespace, namespace_adopted, created_at from project
         where ($1::uuid[] is null or id = any($1)) and ($2::uuid is null or id > $2)
         order by id
         limit $3",
        only as Option<&[Uuid]>,
        after,
        limit
    )
    .fetch_all(db)
    .await
}

/// Deletes the project unless a deployment still references it; returns whether it did.
#[instrument(skip(db))]
pub async fn delete_project_without_deployments(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "delete from project p where p.id = $1
           and not exists (select 1 from model_deployment d where d.project_id = p.id)",
        id
    )
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Whether a project with this name exists.
#[instrument(skip(db))]
pub async fn project_exists(db: impl PgExecutor<'_>, name: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select exists(select 1 from project where name = $1) as "exists!""#,
        name
    )
    .fetch_one(db)
    .await
}

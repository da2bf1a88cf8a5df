//! The `role_binding` table: roles of OIDC users and groups on projects.

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use super::text::Text;
use crate::domain::{Role, RoleBinding, SubjectKind};

#[instrument(skip(db))]
pub async fn insert_role_binding(
    db: impl PgExecutor<'_>,
    id: Uuid,
    project_id: Uuid,
    subject_kind: &str,
    subject: &str,
    role: &str,
    created_by: &str,
) -> Result<RoleBinding, sqlx::Error> {
    sqlx::query_as!(
        RoleBinding,
        r#"insert into role_binding (id, project_id, subject_kind, subject, role, created_by)
           values ($1, $2, $3, $4, $5, $6)
           returning id, subject_kind as "subject_kind: Text<SubjectKind>", subject,
                   role as "role: Text<Role>", created_by, created_at"#,
        id,
        project_id,
        subject_kind,
        subject,
        role,
        created_by
    )
    .fetch_one(db)
    .await
}

#[instrument(skip(db))]
pub async fn list_role_bindings(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<RoleBinding>, sqlx::Error> {
    sqlx::query_as!(
        RoleBinding,
        r#"select id, subject_kind as "subject_kind: Text<SubjectKind>", subject,
                  role as "role: Text<Role>", created_by, created_at
           from role_binding where project_id = $1 and ($2::uuid is null or id > $2)
           order by id limit $3"#,
        project_id,
        after,
        limit
    )
    .fetch_all(db)
    .await
}

#[instrument(skip(db))]
pub async fn delete_role_binding(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    id: Uuid,
) -> Result<Option<RoleBinding>, sqlx::Error> {
    sqlx::query_as!(
        RoleBinding,
        r#"delete from role_binding where project_id = $1 and id = $2
           returning id, subject_kind as "subject_kind: Text<SubjectKind>", subject,
                   role as "role: Text<Role>", created_by, created_at"#,
        project_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// The roles bound to a user or any of their groups on a project.
#[instrument(skip(db, groups))]
pub async fn roles_of_subject(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    user: &str,
    groups: &[String],
) -> Result<Vec<Role>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select role as "role: Text<Role>" from role_binding
         where project_id = $1
           and ((subject_kind = 'user' and subject = $2)
             or (subject_kind = 'group' and subject = any($3)))"#,
        project_id,
        user,
        groups
    )
    .fetch_all(db)
    .await
    .map(|roles: Vec<Text<Role>>| roles.into_iter().map(|r| r.0).collect())
}

/// Projects on which a user or any of their groups has a role.
#[instrument(skip(db, groups))]
pub async fn projects_of_subject(
    db: impl PgExecutor<'_>,
    user: &str,
    groups: &[String],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "select distinct project_id from role_binding
         where (subject_kind = 'user' and subject = $1)
            or (subject_kind = 'group' and subject = any($2))",
        user,
        groups
    )
    .fetch_all(db)
    .await
}

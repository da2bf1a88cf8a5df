//! Role bindings: roles of OIDC users and groups on a project (project admins manage them).

use tracing::instrument;
use uuid::Uuid;

use super::access::authorize;
use super::projects::parse_uuid_cursor;
use super::{Actor, Context, Page, ServiceError, cursor, page_size};
use crate::domain::{FieldErrors, Role, RoleBinding, SubjectKind};
use crate::store;

/// Give an OIDC user or group a role on a project.
#[derive(Debug, Clone)]
pub struct CreateRoleBinding {
    /// `user` (the token's subject claim) or `group` (an entry of its groups claim).
    pub subject_kind: String,
    pub subject: String,
    pub role: Role,
}

#[instrument(skip(ctx, actor, request))]
pub async fn create_role_binding(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    request: CreateRoleBinding,
) -> Result<RoleBinding, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let mut errors = FieldErrors::new();
    let subject_kind = errors.check(
        "subjectKind",
        request
            .subject_kind
            .parse::<SubjectKind>()
            .map_err(|_| "must be `user` or `group`".to_owned()),
    );
    if request.subject.is_empty()
        || request.subject.len() > 256
        || request.subject.chars().any(char::is_control)
    {
        errors.push(
            "subject",
            "must be 1 to 256 characters without control characters",
        );
    }
    let subject_kind = errors.finish(|| subject_kind.expect("checked"))?;

    let mut tx = ctx.pool.begin().await?;
    let binding = store::role_bindings::insert_role_binding(
        &mut *tx,
        Uuid::now_v7(),
        project.id,
        subject_kind.as_str(),
        &request.subject,
        request.role.as_str(),
        actor.name(),
    )
    .await
    .map_err(|err| {
        if store::is_unique_violation(&err, "role_binding_subject_key") {
            ServiceError::conflict(
                Some("subject"),
                format!(
                    "{} `{}` already has a role on this project; delete that binding first",
                    request.subject_kind, request.subject
                ),
            )
        } else {
            err.into()
        }
    })?;
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "RoleBindingCreated",
        &format!("{}/{}", binding.subject_kind, binding.subject),
        &format!(
            "{} `{}` granted {}",
            binding.subject_kind, binding.subject, binding.role
        ),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    // This process at once; the others through the access trigger's notification.
    ctx.access.invalidate();
    Ok(binding)
}

#[instrument(skip(ctx, actor))]
pub async fn list_role_bindings(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<RoleBinding>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let limit = page_size(limit)?;
    let filters = format!("role-bindings|{}", project.id);
    let after = match cursor_param {
        Some(c) => Some(parse_uuid_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows =
        store::role_bindings::list_role_bindings(&ctx.pool, project.id, after, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |b| b.id.to_string()))
}

#[instrument(skip(ctx, actor))]
pub async fn delete_role_binding(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    id: Uuid,
) -> Result<(), ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let mut tx = ctx.pool.begin().await?;
    let binding = store::role_bindings::delete_role_binding(&mut *tx, project.id, id)
        .await?
        .ok_or_else(|| ServiceError::not_found("role binding", id.to_string()))?;
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "RoleBindingDeleted",
        &format!("{}/{}", binding.subject_kind, binding.subject),
        &format!(
            "{} `{}` no longer has {}",
            binding.subject_kind, binding.subject, binding.role
        ),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    // This process at once; the others through the access trigger's notification.
    ctx.access.invalidate();
    Ok(())
}

//! The audit log of project, token and role-binding changes.

use tracing::instrument;

use super::access::{authorize, require_platform_admin};
use super::{Actor, Context, Page, ServiceError, cursor, page_size};
use crate::domain::{AuditEvent, FieldErrors, Role};
use crate::store;

/// A project's audit log (project admins), or the platform's with `project: None`.
#[instrument(skip(ctx, actor))]
pub async fn list_audit_events(
    ctx: &Context,
    actor: &Actor,
    project: Option<&str>,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<AuditEvent>, ServiceError> {
    let project_id = match project {
        Some(name) => Some(authorize(ctx, actor, name, Role::Admin).await?.id),
        None => {
            require_platform_admin(actor)?;
            None
        }
    };
    let limit = page_size(limit)?;
    let filters = format!("audit|{project_id:?}");
    let after =
        match cursor_param {
            Some(c) => Some(cursor::decode(c, &filters)?.parse::<i64>().map_err(|_| {
                FieldErrors::single("cursor", "is not a cursor returned by this list")
            })?),
            None => None,
        };
    let rows = store::audit::list_audit_events(&ctx.pool, project_id, after, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |e| e.id.to_string()))
}

//! Project use cases: create, read, list, delete.

use tracing::instrument;
use uuid::Uuid;

use super::access::{authorize, require_platform_admin, visible_projects};
use super::{Actor, Context, Page, ServiceError, cursor, page_size};
use crate::domain::{FieldErrors, Project, ProjectName, Role};
use crate::store;

/// Create a project.
#[derive(Debug, Clone)]
pub struct CreateProject {
    /// A DNS-1123 label; not a system namespace.
    pub name: String,
    /// The Kubernetes namespace; the name when `None`. Fixed once created.
    pub namespace: Option<String>,
    /// Adopt an existing namespace instead of creating one; it then survives the project.
    pub adopt_namespace: bool,
}

/// Creates a project (platform admins only).
#[instrument(skip(ctx, actor), fields(project = %request.name))]
pub async fn create_project(
    ctx: &Context,
    actor: &Actor,
    request: CreateProject,
) -> Result<Project, ServiceError> {
    require_platform_admin(actor)?;
    let mut errors = FieldErrors::new();
    let name = errors.check("name", ProjectName::parse(&request.name));
    let namespace = match &request.namespace {
        Some(ns) => errors.check("namespace", ProjectName::parse_namespace(ns)),
        None => name.clone(),
    };
    let (name, namespace) = errors.finish(|| (name.unwrap(), namespace.unwrap()))?;

    let mut tx = ctx.pool.begin().await?;
    let inserted = store::projects::insert_project(
        &mut *tx,
        Uuid::now_v7(),
        name.as_str(),
        namespace.as_str(),
        request.adopt_namespace,
    )
    .await;
    let project = match inserted {
        Ok(project) => project,
        Err(err) if store::is_unique_violation(&err, "project_name_key") => {
            return Err(ServiceError::conflict(
                Some("name"),
                format!("project `{name}` already exists"),
            ));
        }
        Err(err) if store::is_unique_violation(&err, "project_namespace_key") => {
            return Err(ServiceError::conflict(
                Some("namespace"),
                format!("namespace `{namespace}` already belongs to another project"),
            ));
        }
        Err(err) => return Err(err.into()),
    };
    let how = if project.namespace_adopted {
        "adopting"
    } else {
        "with"
    };
    let message = format!("project created, {how} namespace {}", project.namespace);
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "ProjectCreated",
        &format!("project/{}", project.name),
        &message,
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(project_id = %project.id, namespace = %project.namespace, "project created");
    Ok(project)
}

/// Reads a project the caller has any role on.
#[instrument(skip(ctx, actor))]
pub async fn get_project(
    ctx: &Context,
    actor: &Actor,
    name: &str,
) -> Result<Project, ServiceError> {
    Ok(authorize(ctx, actor, name, Role::Viewer)
        .await?
        .into_project())
}

/// Lists the projects the caller may see.
#[instrument(skip(ctx, actor))]
pub async fn list_projects(
    ctx: &Context,
    actor: &Actor,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<Page<Project>, ServiceError> {
    let limit = page_size(limit)?;
    let after = match cursor {
        Some(c) => Some(parse_uuid_cursor(&cursor::decode(c, "projects")?)?),
        None => None,
    };
    let visible = visible_projects(ctx, actor).await?;
    let rows =
        store::projects::list_projects(&ctx.pool, visible.as_deref(), after, limit + 1).await?;
    Ok(cursor::page(rows, limit, "projects", |p| p.id.to_string()))
}

/// Deletes a project (platform admins only); refused while it still has deployments.
#[instrument(skip(ctx, actor))]
pub async fn delete_project(ctx: &Context, actor: &Actor, name: &str) -> Result<(), ServiceError> {
    let project = authorize(ctx, actor, name, Role::Admin).await?;
    require_platform_admin(actor)?;
    let mut tx = ctx.pool.begin().await?;
    if !store::projects::delete_project_without_deployments(&mut *tx, project.id).await? {
        return Err(ServiceError::conflict(
            None,
            format!("project `{name}` still has deployments; delete them first"),
        ));
    }
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "ProjectDeleted",
        &format!("project/{name}"),
        "project deleted",
        actor.name(),
    )
    .await?;
    // A work item under the project's id: no record has it, so the worker collects what
    // the project leaves in the cluster (its namespace) now rather than at the next resync.
    store::work_queue::enqueue_reconcile(
        &mut *tx,
        project.id,
        crate::telemetry::current_traceparent().as_deref(),
    )
    .await?;
    tx.commit().await?;
    // This process at once; the others through the access trigger's notification.
    ctx.access.invalidate();
    tracing::info!(project_id = %project.id, "project deleted");
    Ok(())
}

pub(super) fn parse_uuid_cursor(key: &str) -> Result<Uuid, FieldErrors> {
    key.parse()
        .map_err(|_| FieldErrors::single("cursor", "is not a cursor returned by this list"))
}

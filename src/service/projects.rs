//! Project use cases: create, read, list, delete.

use serde::Deserialize;
use tracing::instrument;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Context, Page, ServiceError, cursor, page_size};
use crate::domain::{FieldErrors, Project, ProjectName, is_dns1123_label};
use crate::store;

/// The body of `POST /api/v1/projects`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProject {
    /// A DNS-1123 label; not a system namespace.
    pub name: String,
    /// The Kubernetes namespace; defaults to the name. Fixed once created.
    #[serde(default)]
    pub namespace: Option<String>,
}

#[instrument(skip(ctx), fields(project = %request.name))]
pub async fn create_project(
    ctx: &Context,
    request: CreateProject,
) -> Result<Project, ServiceError> {
    let mut errors = FieldErrors::new();
    let name = errors.check("name", ProjectName::parse(&request.name));
    let namespace = match &request.namespace {
        Some(ns) => errors.check("namespace", ProjectName::parse_namespace(ns)),
        None => name.clone(),
    };
    let (name, namespace) = errors.finish(|| (name.unwrap(), namespace.unwrap()))?;

    match store::projects::insert_project(
        &ctx.pool,
        Uuid::now_v7(),
        name.as_str(),
        namespace.as_str(),
        false,
    )
    .await
    {
        Ok(project) => {
            tracing::info!(project_id = %project.id, namespace = %project.namespace, "project created");
            Ok(project)
        }
        Err(err) if store::is_unique_violation(&err, "project_name_key") => Err(
            ServiceError::conflict(Some("name"), format!("project `{name}` already exists")),
        ),
        Err(err) if store::is_unique_violation(&err, "project_namespace_key") => {
            Err(ServiceError::conflict(
                Some("namespace"),
                format!("namespace `{namespace}` already belongs to another project"),
            ))
        }
        Err(err) => Err(err.into()),
    }
}

#[instrument(skip(ctx))]
pub async fn get_project(ctx: &Context, name: &str) -> Result<Project, ServiceError> {
    if !is_dns1123_label(name) {
        return Err(ServiceError::not_found("project", name));
    }
    store::projects::find_project_by_name(&ctx.pool, name)
        .await?
        .ok_or_else(|| ServiceError::not_found("project", name))
}

#[instrument(skip(ctx))]
pub async fn list_projects(
    ctx: &Context,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<Page<Project>, ServiceError> {
    let limit = page_size(limit)?;
    let after = match cursor {
        Some(c) => Some(parse_uuid_cursor(&cursor::decode(c, "projects")?)?),
        None => None,
    };
    let rows = store::projects::list_projects(&ctx.pool, after, limit + 1).await?;
    Ok(cursor::page(rows, limit, "projects", |p| p.id.to_string()))
}

/// Deletes a project; refused while it still has deployments (even ones being deleted).
#[instrument(skip(ctx))]
pub async fn delete_project(ctx: &Context, name: &str) -> Result<(), ServiceError> {
    let project = get_project(ctx, name).await?;
    if store::projects::delete_project_without_deployments(&ctx.pool, project.id).await? {
        tracing::info!(project_id = %project.id, "project deleted");
        Ok(())
    } else {
        Err(ServiceError::conflict(
            None,
            format!("project `{name}` still has deployments; delete them first"),
        ))
    }
}

pub(super) fn parse_uuid_cursor(key: &str) -> Result<Uuid, FieldErrors> {
    key.parse()
        .map_err(|_| FieldErrors::single("cursor", "is not a cursor returned by this list"))
}

//! `/api/v1/projects`

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use super::responses::{
    InvalidField, InvalidParameter, NoSuchProject, NotPlatformAdmin, ProjectPath,
};
use super::wire::{CreateProject, Page};
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{JsonBody, Query};
use crate::domain::Project;
use crate::service::Actor;
use crate::service::projects as service;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListProjects {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
}

/// Create a project and fix its namespace (platform admins).
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects",
    request_body = CreateProject,
    responses(
        (status = 201, description = "Created", body = Project,
            headers(("Location" = String, description = "URL of the new project"))),        (status = 401, description = "Not authenticated", body = Problem, content_type = "application/problem+json"),
        NotPlatformAdmin,
        (status = 409, description = "Name or namespace taken", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn create_project(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(request): JsonBody<CreateProject>,
) -> Result<Response, ApiError> {
    let project = service::create_project(&state.ctx, &actor, request.into()).await?;
    let location = format!("/api/v1/projects/{}", project.name);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(project),
    )
        .into_response())
}

/// List the projects the caller has a role on, oldest first.
#[utoipa::path(get, path = "/api/v1/projects", tag = "projects",
    params(ListProjects),
    responses(
        (status = 200, description = "A page of projects", body = Page<Project>),
        InvalidParameter,
    ))]
pub async fn list_projects(
    State(state): State<AppState>,
    actor: Actor,
    Query(query): Query<ListProjects>,
) -> Result<Json<Page<Project>>, ApiError> {
    let page =
        service::list_projects(&state.ctx, &actor, query.limit, query.cursor.as_deref()).await?;
    Ok(Json(page.into()))
}

/// Get a project.
#[utoipa::path(get, path = "/api/v1/projects/{project}", tag = "projects",
    params(ProjectPath),
    responses(
        (status = 200, description = "The project", body = Project),
        NoSuchProject,
    ))]
pub async fn get_project(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(
        service::get_project(&state.ctx, &actor, &project).await?,
    ))
}

/// Delete a project that has no deployments (platform admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}", tag = "projects",
    params(ProjectPath),
    responses(
        (status = 204, description = "Deleted"),
        NoSuchProject,
        (status = 409, description = "The project still has deployments", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete_project(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
) -> Result<StatusCode, ApiError> {
    service::delete_project(&state.ctx, &actor, &project).await?;
    Ok(StatusCode::NO_CONTENT)
}

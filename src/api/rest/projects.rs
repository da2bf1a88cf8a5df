//! `/api/v1/projects`

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{JsonBody, Query};
use crate::domain::Project;
use crate::service::Actor;
use crate::service::projects::{self as service, CreateProject};

/// A page of projects.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectList {
    pub items: Vec<Project>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListProjects {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page.
    pub cursor: Option<String>,
}

/// Create a project and fix its namespace (platform admins).
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects",
    request_body = CreateProject,
    responses(
        (status = 201, description = "Created", body = Project,
            headers(("Location" = String, description = "URL of the new project"))),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Not authenticated", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not a platform admin", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name or namespace taken", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn create_project(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(request): JsonBody<CreateProject>,
) -> Result<Response, ApiError> {
    let project = service::create_project(&state.ctx, &actor, request).await?;
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
        (status = 200, description = "A page of projects", body = ProjectList),
        (status = 422, description = "Invalid parameter", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn list_projects(
    State(state): State<AppState>,
    actor: Actor,
    Query(query): Query<ListProjects>,
) -> Result<Json<ProjectList>, ApiError> {
    let page =
        service::list_projects(&state.ctx, &actor, query.limit, query.cursor.as_deref()).await?;
    Ok(Json(ProjectList {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// Get a project.
#[utoipa::path(get, path = "/api/v1/projects/{project}", tag = "projects",
    params(("project" = String, Path, description = "Project name")),
    responses(
        (status = 200, description = "The project", body = Project),
        (status = 404, description = "No such project", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn get_project(
    State(state): State<AppState>,
    actor: Actor,
    Path(project): Path<String>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(
        service::get_project(&state.ctx, &actor, &project).await?,
    ))
}

/// Delete a project that has no deployments (platform admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}", tag = "projects",
    params(("project" = String, Path, description = "Project name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such project", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The project still has deployments", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete_project(
    State(state): State<AppState>,
    actor: Actor,
    Path(project): Path<String>,
) -> Result<StatusCode, ApiError> {
    service::delete_project(&state.ctx, &actor, &project).await?;
    Ok(StatusCode::NO_CONTENT)
}

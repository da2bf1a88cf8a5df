//! Model keys: credentials for calling a project's models through the Gateway.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use uuid::Uuid;

use super::responses::{
    InvalidField, NoSuchVisibleProject, NotProjectAdmin, ProjectItemPath, ProjectPath,
};
use super::wire::{CreateModelKey, CreatedModelKey, ListTokens, Page};
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{JsonBody, Query};
use crate::domain::{KeyUsage, ModelKey};
use crate::service::{Actor, model_keys};

/// An id from a URL that is not a UUID names nothing: 404.
fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    id.parse()
        .map_err(|_| ApiError::NotFound(format!("model key `{id}` not found")))
}

/// Create a model key (project admins). The secret is shown once.
#[utoipa::path(post, path = "/api/v1/projects/{project}/keys", tag = "keys",
    params(ProjectPath),
    request_body = CreateModelKey,
    responses(
        (status = 201, description = "Created; `secret` is shown only now", body = CreatedModelKey),
        NotProjectAdmin,
        NoSuchVisibleProject,
        (status = 409, description = "A live key of the project has that name", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn create_key(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    JsonBody(request): JsonBody<CreateModelKey>,
) -> Result<impl IntoResponse, ApiError> {
    let created = model_keys::create_key(&state.ctx, &actor, &project, request.into()).await?;
    Ok((StatusCode::CREATED, Json(CreatedModelKey::from(created))))
}

/// List the project's model keys, newest first, without their secrets (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/keys", tag = "keys",
    params(ProjectPath, ListTokens),
    responses(
        (status = 200, description = "The keys", body = Page<ModelKey>),
        NotProjectAdmin,
        NoSuchVisibleProject,
    ))]
pub async fn list_keys(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(query): Query<ListTokens>,
) -> Result<Json<Page<ModelKey>>, ApiError> {
    let page = model_keys::list_keys(&state.ctx, &actor, &project, &query.into()).await?;
    Ok(Json(page.into()))
}

/// One model key, without its secret (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/keys/{id}", tag = "keys",
    params(ProjectItemPath),
    responses(
        (status = 200, description = "The key", body = ModelKey),
        NotProjectAdmin,
        (status = 404, description = "No such key", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn get_key(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectItemPath { project, id }): Path<ProjectItemPath>,
) -> Result<Json<ModelKey>, ApiError> {
    let id = parse_id(&id)?;
    Ok(Json(
        model_keys::get_key(&state.ctx, &actor, &project, id).await?,
    ))
}

/// Revoke a model key: the Gateway refuses it within a second (project admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/keys/{id}", tag = "keys",
    params(ProjectItemPath),
    responses(
        (status = 200, description = "Revoked", body = ModelKey),
        NotProjectAdmin,
        (status = 404, description = "No such live key", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn revoke_key(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectItemPath { project, id }): Path<ProjectItemPath>,
) -> Result<Json<ModelKey>, ApiError> {
    let id = parse_id(&id)?;
    Ok(Json(
        model_keys::revoke_key(&state.ctx, &actor, &project, id).await?,
    ))
}

/// The days of a usage report.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Whole days (UTC) up to and including today, 1 to 366 (default 30).
    #[param(minimum = 1, maximum = 366)]
    pub days: Option<i64>,
}

/// A model key's requests per day, as its checks let them through (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/keys/{id}/usage", tag = "keys",
    params(ProjectItemPath, UsageParams),
    responses(
        (status = 200, description = "Requests per UTC day", body = KeyUsage),
        NotProjectAdmin,
        (status = 404, description = "No such key", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn key_usage(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectItemPath { project, id }): Path<ProjectItemPath>,
    Query(query): Query<UsageParams>,
) -> Result<Json<KeyUsage>, ApiError> {
    let id = parse_id(&id)?;
    Ok(Json(
        model_keys::key_usage(&state.ctx, &actor, &project, id, query.days).await?,
    ))
}

//! `/api/v1/capacity`, and a project's `quota` and GPU `usage`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::responses::{
    InvalidField, InvalidParameter, NoSuchProject, NotPlatformAdmin, NotProjectAdmin, ProjectPath,
};
use super::wire::UsageQuery;
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{JsonBody, Query};
use crate::domain::{CapacityReport, ProjectQuota, QuotaSpec, UsageReport};
use crate::service::Actor;
use crate::service::capacity as service;

/// The cluster's GPUs per resource name and product: nodes, allocatable, requested (by
/// every pod, and by modelplane's), free, the largest free block and unavailable nodes.
///
/// Reported by the worker from its watch of Nodes and of the pods on GPU nodes, within
/// seconds of a change. Any authenticated caller may read it.
#[utoipa::path(get, path = "/api/v1/capacity", tag = "capacity",
    responses(
        (status = 200, description = "The cluster's GPUs (`observedAt` null: not reported yet)", body = CapacityReport),
        (status = 401, description = "Not authenticated", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn get_capacity(
    State(state): State<AppState>,
    actor: Actor,
) -> Result<Json<CapacityReport>, ApiError> {
    Ok(Json(service::get_capacity(&state.ctx, &actor).await?))
}

/// A project's quota next to what its specs ask for (any project member).
///
/// `used` counts desired replicas x GPUs per replica over every deployment and canary
/// not being deleted, so it holds before pods exist.
#[utoipa::path(get, path = "/api/v1/projects/{project}/quota", tag = "capacity",
    params(ProjectPath),
    responses(
        (status = 200, description = "Limits (`null`: none) and use", body = ProjectQuota),
        NoSuchProject,
    ))]
pub async fn get_quota(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
) -> Result<Json<ProjectQuota>, ApiError> {
    Ok(Json(
        service::get_quota(&state.ctx, &actor, &project).await?,
    ))
}

/// Set (replace) a project's quota (platform admins).
///
/// From then on a create, scale, patch, rollback or canary that would take the project
/// past a limit is refused with 409 `quota-exceeded`; a quota below current use blocks
/// growth, not what runs.
#[utoipa::path(put, path = "/api/v1/projects/{project}/quota", tag = "capacity",
    params(ProjectPath),
    request_body = QuotaSpec,
    responses(
        (status = 200, description = "The quota, with current use", body = ProjectQuota),
        NotPlatformAdmin,
        NoSuchProject,
        InvalidField,
    ))]
pub async fn set_quota(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    JsonBody(quota): JsonBody<QuotaSpec>,
) -> Result<Json<ProjectQuota>, ApiError> {
    Ok(Json(
        service::set_quota(&state.ctx, &actor, &project, quota).await?,
    ))
}

/// Remove a project's quota (platform admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/quota", tag = "capacity",
    params(ProjectPath),
    responses(
        (status = 204, description = "No quota any more"),
        NotPlatformAdmin,
        NoSuchProject,
    ))]
pub async fn delete_quota(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
) -> Result<StatusCode, ApiError> {
    service::delete_quota(&state.ctx, &actor, &project).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// GPU-hours of the project's ready replicas, per deployment and per day (UTC), for the
/// last `days` days (project admins). Deleted deployments are included.
#[utoipa::path(get, path = "/api/v1/projects/{project}/usage", tag = "capacity",
    params(ProjectPath, UsageQuery),
    responses(
        (status = 200, description = "GPU-hours", body = UsageReport),
        NotProjectAdmin,
        NoSuchProject,
        InvalidParameter,
    ))]
pub async fn get_usage(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(query): Query<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    Ok(Json(
        service::get_usage(&state.ctx, &actor, &project, &query.into()).await?,
    ))
}

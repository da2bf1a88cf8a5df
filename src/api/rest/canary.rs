//! `/api/v1/projects/{project}/deployments/{name}/canary` and its actions.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::deployments::deployment_response;
use super::responses::{BeingDeleted, DeploymentPath, ETagMismatch, IfMatchHeader};
use super::wire::{StartCanary, UpdateCanary, WriteOptions};
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{IfMatch, JsonBody, Query};
use crate::domain::Deployment;
use crate::service::Actor;
use crate::service::canary as service;

/// Start a canary: a second track running another spec on a share of the traffic.
///
/// The canary runs as its own Kubernetes Deployment and Service (`<name>-canary`); the
/// deployment's HTTPRoute sends every request carrying the header to it, and `weight`
/// percent of the others once it has a ready replica (none before, so the stable track
/// keeps them). Its spec is a merge patch of the deployment's spec, or a revision's; it
/// serves the same model name on the same route. `status.canary` reports the track.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/canary", tag = "canary",
    params(DeploymentPath, IfMatchHeader, WriteOptions),
    request_body = StartCanary,
    responses(
        (status = 201, description = "Canary started", body = Deployment),
        (status = 200, description = "With `dryRun=true`: what would be started; nothing was written", body = Deployment),
        (status = 404, description = "No such project or deployment", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The deployment already has a canary, or is being deleted, or the project's quota would be exceeded (`quota-exceeded`)", body = Problem, content_type = "application/problem+json"),
        ETagMismatch,
        (status = 422, description = "Invalid weight, header or spec (each error names its field)", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn start_canary(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    JsonBody(request): JsonBody<StartCanary>,
) -> Result<Response, ApiError> {
    let deployment = service::start_canary(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
        options.into(),
    )
    .await?;
    let status = if options.dry_run {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(deployment_response(status, deployment))
}

/// Change the canary's weight or header (an `application/json` body naming what changes).
#[utoipa::path(patch, path = "/api/v1/projects/{project}/deployments/{name}/canary", tag = "canary",
    params(DeploymentPath, IfMatchHeader),
    request_body = UpdateCanary,
    responses(
        (status = 200, description = "Changed (unchanged when nothing differs)", body = Deployment),
        (status = 404, description = "No such project, deployment or canary", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The canary is being promoted, or the deployment deleted", body = Problem, content_type = "application/problem+json"),
        ETagMismatch,
        (status = 422, description = "Invalid weight or header", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn update_canary(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    JsonBody(request): JsonBody<UpdateCanary>,
) -> Result<Response, ApiError> {
    let deployment = service::update_canary(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Promote the canary: its spec becomes the deployment's, as a new revision.
///
/// The deployment keeps its replica count and route. The canary must be `Ready`. While the
/// stable Deployment rolls to the new spec the canary carries every request; once every
/// stable replica runs it and is available, the route sends everything back to the stable
/// track, and the canary is removed after the Gateway has accepted that route.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/canary/promote", tag = "canary",
    params(DeploymentPath, IfMatchHeader),
    responses(
        (status = 200, description = "Promotion under way", body = Deployment),
        (status = 404, description = "No such project, deployment or canary", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The canary is not Ready, or the deployment is being deleted", body = Problem, content_type = "application/problem+json"),
        ETagMismatch,
    ))]
pub async fn promote_canary(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
) -> Result<Response, ApiError> {
    let deployment =
        service::promote_canary(&state.ctx, &actor, &project, &name, &precondition).await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Abort the canary: all traffic goes back to the stable track and the canary is removed.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/canary/abort", tag = "canary",
    params(DeploymentPath, IfMatchHeader),
    responses(
        (status = 200, description = "Aborted; the worker removes the canary's objects", body = Deployment),
        (status = 404, description = "No such project, deployment or canary", body = Problem, content_type = "application/problem+json"),
        BeingDeleted,
        ETagMismatch,
    ))]
pub async fn abort_canary(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
) -> Result<Response, ApiError> {
    let deployment =
        service::abort_canary(&state.ctx, &actor, &project, &name, &precondition).await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

//! `/api/v1/projects/{project}/deployments` and the deployment actions.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::responses::{
    AdapterPath, BeingDeleted, BeingDeletedOrOverQuota, DeploymentPath, ETagMismatch,
    IfMatchHeader, InvalidParameter, NoSuchDeployment, NoSuchProject, ProjectPath,
};
use super::wire::{
    AddAdapter, CreateDeployment, ListDeployments, Page, ReplaceDeployment, RollbackDeployment,
    ScaleDeployment, WriteOptions,
};
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{IdempotencyKey, IfMatch, JsonBody, MergePatch, Query};
use crate::domain::{Deployment, Revision, TimelineEvent};
use crate::service::Actor;
use crate::service::deployments::{self as service, DeploymentRef};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProjectEventParams {
    /// The deployment's id; works after the deployment is deleted.
    pub deployment_id: Uuid,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
}

/// `200 OK` (or another status) with the deployment and its `ETag`, and each of its
/// `warnings` as a `Warning: 299 - "…"` header (as Kubernetes sends admission warnings).
pub(super) fn deployment_response(status: StatusCode, deployment: Deployment) -> Response {
    let etag = HeaderValue::from_str(&deployment.etag()).expect("an ETag is a valid header");
    let warnings: Vec<HeaderValue> = deployment
        .warnings
        .iter()
        .filter_map(|w| {
            let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
            HeaderValue::from_str(&format!("299 - \"{quoted}\"")).ok()
        })
        .collect();
    let mut response = (status, Json(deployment)).into_response();
    response.headers_mut().insert(header::ETAG, etag);
    for warning in warnings {
        response.headers_mut().append(header::WARNING, warning);
    }
    response
}

/// Create a deployment.
///
/// With an `Idempotency-Key`, a retried request returns the original response instead of a
/// second deployment or a 409; reusing the key with a different body is a 422.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments", tag = "deployments",
    params(
        ProjectPath,
        WriteOptions,
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried create return the original result (kept 24 hours per project and caller); ignored with `dryRun`"),
    ),
    request_body = CreateDeployment,
    responses(
        (status = 201, description = "Created (or replayed)", body = Deployment,
            headers(("Location" = String, description = "URL of the deployment"), ("ETag" = String, description = "Entity tag of the spec"),
                ("Warning" = String, description = "`299 - \"…\"`, once per entry of `warnings`"))),
        (status = 200, description = "With `dryRun=true`: what would be created; nothing was written", body = Deployment),
        NoSuchProject,
        (status = 409, description = "The name is taken, or the project's quota would be exceeded (`quota-exceeded`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, a replica needing more GPUs than any node has (without `force`), or an Idempotency-Key reused with another body", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn create_deployment(
    State(state): State<AppState>,
    Path(ProjectPath { project }): Path<ProjectPath>,
    actor: Actor,
    Query(options): Query<WriteOptions>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(request): JsonBody<CreateDeployment>,
) -> Result<Response, ApiError> {
    let created = service::create_deployment(
        &state.ctx,
        &actor,
        &project,
        request.into(),
        key.as_deref(),
        options.into(),
    )
    .await?;
    let deployment = created.deployment;
    if options.dry_run {
        return Ok(deployment_response(StatusCode::OK, deployment));
    }
    let location = format!(
        "/api/v1/projects/{}/deployments/{}",
        deployment.project, deployment.name
    );
    let mut response = deployment_response(StatusCode::CREATED, deployment);
    response.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&location).expect("names are valid header text"),
    );
    if created.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// List a project's deployments, oldest first.
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments", tag = "deployments",
    params(ProjectPath, ListDeployments),
    responses(
        (status = 200, description = "A page of deployments", body = Page<Deployment>),
        NoSuchProject,
        (status = 422, description = "Invalid filter or cursor", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn list_deployments(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(query): Query<ListDeployments>,
) -> Result<Json<Page<Deployment>>, ApiError> {
    let page = service::list_deployments(&state.ctx, &actor, &project, &query.into()).await?;
    Ok(Json(page.into()))
}

/// Get a deployment, its status and its `ETag`.
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}", tag = "deployments",
    params(DeploymentPath),
    responses(
        (status = 200, description = "The deployment", body = Deployment,
            headers(("ETag" = String, description = "Entity tag of the spec"))),
        NoSuchDeployment,
    ))]
pub async fn get_deployment(
    State(state): State<AppState>,
    actor: Actor,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
) -> Result<Response, ApiError> {
    let deployment = service::get_deployment(&state.ctx, &actor, &project, &name).await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Replace the spec.
#[utoipa::path(put, path = "/api/v1/projects/{project}/deployments/{name}", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
        WriteOptions,
    ),
    request_body = ReplaceDeployment,
    responses(
        (status = 200, description = "Updated (a new generation and revision when the spec changed)", body = Deployment,
            headers(("ETag" = String, description = "Entity tag of the spec"))),
        NoSuchDeployment,
        BeingDeletedOrOverQuota,
        ETagMismatch,
        (status = 422, description = "Invalid fields", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn replace_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    JsonBody(request): JsonBody<ReplaceDeployment>,
) -> Result<Response, ApiError> {
    let deployment = service::replace_deployment(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Change the spec with a JSON merge patch (RFC 7386) of `{"spec": …}`.
#[utoipa::path(patch, path = "/api/v1/projects/{project}/deployments/{name}", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
        WriteOptions,
    ),
    request_body(content = serde_json::Value, content_type = "application/merge-patch+json",
        description = "e.g. `{\"spec\": {\"engine\": {\"image\": \"vllm/vllm-openai:v0.11.0\"}}}`; `null` removes a field"),
    responses(
        (status = 200, description = "Updated (a new generation and revision when the spec changed)", body = Deployment,
            headers(("ETag" = String, description = "Entity tag of the spec"))),        NoSuchDeployment,
        BeingDeletedOrOverQuota,
        ETagMismatch,
        (status = 415, description = "Not application/merge-patch+json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The patched spec is invalid", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn patch_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    MergePatch(patch): MergePatch,
) -> Result<Response, ApiError> {
    let deployment = service::patch_deployment(
        &state.ctx,
        &actor,
        &project,
        &name,
        patch,
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Delete a deployment: it moves to `Deleting` and its objects are removed by the worker.
#[utoipa::path(delete, path = "/api/v1/projects/{project}/deployments/{name}", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
    ),
    responses(
        (status = 202, description = "Deletion accepted", body = Deployment),
        NoSuchDeployment,
        ETagMismatch,
    ))]
pub async fn delete_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
) -> Result<Response, ApiError> {
    let deployment =
        service::delete_deployment(&state.ctx, &actor, &project, &name, &precondition).await?;
    Ok(deployment_response(StatusCode::ACCEPTED, deployment))
}

/// Set the number of replicas.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/scale", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
        WriteOptions,
    ),
    request_body = ScaleDeployment,
    responses(
        (status = 200, description = "Scaled", body = Deployment),
        NoSuchDeployment,
        BeingDeletedOrOverQuota,
        ETagMismatch,
        (status = 422, description = "Invalid replicas", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn scale_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    JsonBody(request): JsonBody<ScaleDeployment>,
) -> Result<Response, ApiError> {
    let deployment = service::scale_deployment(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Serve a LoRA adapter of the base model under its own `model` name: added to
/// `spec.adapters`; running pods load it without a restart (the first adapter of a
/// deployment restarts its pods once, since the engine enables LoRA at start).
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/adapters", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
        WriteOptions,
    ),
    request_body = AddAdapter,
    responses(
        (status = 200, description = "Added to the spec", body = Deployment),
        NoSuchDeployment,
        (status = 409, description = "The deployment is being deleted, or already serves an adapter of that name", body = Problem, content_type = "application/problem+json"),
        ETagMismatch,
        (status = 422, description = "Invalid name or source (the field is named)", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn add_adapter(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    JsonBody(request): JsonBody<AddAdapter>,
) -> Result<Response, ApiError> {
    let deployment = service::add_adapter(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Stop serving a LoRA adapter: removed from `spec.adapters`; running pods unload it
/// without a restart.
#[utoipa::path(delete, path = "/api/v1/projects/{project}/deployments/{name}/adapters/{adapter}", tag = "deployments",
    params(
        AdapterPath,
        IfMatchHeader,
        WriteOptions,
    ),
    responses(
        (status = 200, description = "Removed from the spec", body = Deployment),
        (status = 404, description = "No such project, deployment or adapter", body = Problem, content_type = "application/problem+json"),
        BeingDeleted,
        ETagMismatch,
    ))]
pub async fn remove_adapter(
    State(state): State<AppState>,
    Path(AdapterPath {
        project,
        name,
        adapter,
    }): Path<AdapterPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
) -> Result<Response, ApiError> {
    let deployment = service::remove_adapter(
        &state.ctx,
        &actor,
        &project,
        &name,
        &adapter,
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Replace every pod without changing the spec (sets the restart marker).
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/restart", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
    ),
    responses(
        (status = 200, description = "Restart requested", body = Deployment),
        NoSuchDeployment,
        BeingDeleted,
        ETagMismatch,
    ))]
pub async fn restart_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
) -> Result<Response, ApiError> {
    let deployment =
        service::restart_deployment(&state.ctx, &actor, &project, &name, &precondition).await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// Make an earlier revision's spec current again, as a new revision.
///
/// The current replica count is kept unless `replicas` is given.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/rollback", tag = "deployments",
    params(
        DeploymentPath,
        IfMatchHeader,
        WriteOptions,
    ),
    request_body = RollbackDeployment,
    responses(
        (status = 200, description = "Rolled back (unchanged when the revision equals the current spec)", body = Deployment),
        NoSuchDeployment,
        BeingDeletedOrOverQuota,
        ETagMismatch,
        (status = 422, description = "No such revision, or invalid replicas", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn rollback_deployment(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    IfMatch(precondition): IfMatch,
    Query(options): Query<WriteOptions>,
    JsonBody(request): JsonBody<RollbackDeployment>,
) -> Result<Response, ApiError> {
    let deployment = service::rollback_deployment(
        &state.ctx,
        &actor,
        &project,
        &name,
        request.into(),
        &precondition,
        options.into(),
    )
    .await?;
    Ok(deployment_response(StatusCode::OK, deployment))
}

/// List the revisions of a deployment, newest first.
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/revisions", tag = "deployments",
    params(DeploymentPath, PageParams),
    responses(
        (status = 200, description = "A page of revisions", body = Page<Revision>),
        NoSuchDeployment,
    ))]
pub async fn list_revisions(
    State(state): State<AppState>,
    actor: Actor,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    Query(page): Query<PageParams>,
) -> Result<Json<Page<Revision>>, ApiError> {
    let page = service::list_revisions(
        &state.ctx,
        &actor,
        &project,
        &name,
        page.limit,
        page.cursor.as_deref(),
    )
    .await?;
    Ok(Json(page.into()))
}

/// The timeline of a deployment, oldest first.
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/events", tag = "deployments",
    params(DeploymentPath, PageParams),
    responses(
        (status = 200, description = "A page of events", body = Page<TimelineEvent>),
        NoSuchDeployment,
    ))]
pub async fn list_deployment_events(
    State(state): State<AppState>,
    actor: Actor,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    Query(page): Query<PageParams>,
) -> Result<Json<Page<TimelineEvent>>, ApiError> {
    let page = service::list_events(
        &state.ctx,
        &actor,
        &project,
        DeploymentRef::Name(&name),
        page.limit,
        page.cursor.as_deref(),
    )
    .await?;
    Ok(Json(page.into()))
}

/// The timeline of a deployment by id, also after it was deleted.
#[utoipa::path(get, path = "/api/v1/projects/{project}/events", tag = "deployments",
    params(ProjectPath, ProjectEventParams),
    responses(
        (status = 200, description = "A page of events (empty for an unknown id)", body = Page<TimelineEvent>),
        NoSuchProject,
        InvalidParameter,
    ))]
pub async fn list_project_events(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(params): Query<ProjectEventParams>,
) -> Result<Json<Page<TimelineEvent>>, ApiError> {
    let page = service::list_events(
        &state.ctx,
        &actor,
        &project,
        DeploymentRef::Id(params.deployment_id),
        params.limit,
        params.cursor.as_deref(),
    )
    .await?;
    Ok(Json(page.into()))
}

/// Send one OpenAI chat completion to the deployment's model server and return its answer
/// ("try it"). Needs the viewer role. The body is the OpenAI chat-completions request
/// (`model` defaults to the served name; `stream` is refused); the answer is the model
/// server's JSON, unchanged. modelplane calls the deployment's first external URL (or its
/// in-cluster URL with `MODELPLANE_CHAT_VIA=cluster`), so a browser on modelplane's origin
/// needs no CORS from the Gateway.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/chat/completions", tag = "deployments",
    params(DeploymentPath),
    request_body(content = std::collections::HashMap<String, serde_json::Value>, description = "An OpenAI chat-completions request, e.g. `{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}`"),
    responses(
        (status = 200, description = "The model server's answer (`choices[0].message.content`)", body = std::collections::HashMap<String, serde_json::Value>),
        NoSuchDeployment,
        (status = 409, description = "The deployment has no endpoint yet", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No `messages`, or `stream: true`", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "The model server could not be reached or answered with an error", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn chat_completion(
    State(state): State<AppState>,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    actor: Actor,
    JsonBody(request): JsonBody<serde_json::Value>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let answer = crate::service::chat::chat_completion(
        &state.ctx,
        &state.models,
        &actor,
        &project,
        &name,
        request,
    )
    .await?;
    Ok(Json(answer))
}

//! Tokens, role bindings, the audit log and `whoami`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::deployments::PageParams;
use super::responses::{
    IdPath, InvalidField, NoSuchVisibleProject, NotPlatformAdmin, NotProjectAdmin, ProjectItemPath,
    ProjectPath,
};
use super::wire::{CreateRoleBinding, CreateToken, CreatedToken, ListTokens, Page};
use crate::api::AppState;
use crate::api::error::{ApiError, Problem};
use crate::api::extract::{JsonBody, Query};
use crate::auth::SignInConfig;
use crate::domain::{ApiToken, AuditEvent, ProjectAccess, RoleBinding};
use crate::service::{Actor, Identity, audit};
use crate::service::{role_bindings, tokens};

/// The authenticated caller.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// How the caller appears in timelines and audit logs.
    pub name: String,
    /// `token` or `user`.
    pub kind: String,
    pub platform_admin: bool,
    /// The user's groups (OIDC), empty for tokens.
    pub groups: Vec<String>,
    /// The project a project token works on; `null` for platform tokens and users (whose
    /// roles come from role bindings on each project).
    pub project: Option<String>,
    /// A token's role (`viewer`, `editor`, `admin`, `platform-admin`); for a user,
    /// `platform-admin` or `null`.
    pub role: Option<String>,
}

/// How to sign in (no credential needed): whether the portal offers single sign-on with
/// the company's identity provider, with which issuer, client and scopes. API tokens are
/// always accepted.
#[utoipa::path(get, path = "/api/v1/auth/config", tag = "access",
    security(()),
    responses(
        (status = 200, description = "How to sign in", body = SignInConfig),
    ))]
pub async fn auth_config(State(state): State<AppState>) -> Json<SignInConfig> {
    Json(state.auth.sign_in())
}

/// An id from a URL that is not a UUID names nothing: 404.
fn parse_id(id: &str, kind: &'static str) -> Result<Uuid, ApiError> {
    id.parse()
        .map_err(|_| ApiError::NotFound(format!("{kind} `{id}` not found")))
}

/// Who am I? Shows the identity the credential resolves to.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "access",
    responses(
        (status = 200, description = "The caller", body = WhoAmI),
        (status = 401, description = "Not authenticated", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn whoami(State(state): State<AppState>, actor: Actor) -> Result<Json<WhoAmI>, ApiError> {
    let (kind, groups) = match &actor.identity {
        Identity::Token { .. } => ("token", Vec::new()),
        Identity::User { groups, .. } => ("user", groups.clone()),
        Identity::System => ("system", Vec::new()),
    };
    let described = crate::service::access::describe_caller(&state.ctx, &actor).await?;
    Ok(Json(WhoAmI {
        platform_admin: actor.is_platform_admin(),
        name: actor.name,
        kind: kind.into(),
        groups,
        project: described.project,
        role: described.role.map(str::to_owned),
    }))
}

/// The caller's effective role on the project (any project member): from a project
/// token's role, the role bindings of the user and their groups, or the platform-admin
/// role. What the API will allow the caller there, so a client can show exactly those
/// controls.
#[utoipa::path(get, path = "/api/v1/projects/{project}/me", tag = "access",
    params(ProjectPath),
    responses(
        (status = 200, description = "The caller's role on the project and where it comes from", body = ProjectAccess),
        NoSuchVisibleProject,
    ))]
pub async fn my_access(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
) -> Result<Json<ProjectAccess>, ApiError> {
    Ok(Json(
        crate::service::access::my_access(&state.ctx, &actor, &project).await?,
    ))
}

/// Create a token with a role on the project (project admins). The secret is shown once.
#[utoipa::path(post, path = "/api/v1/projects/{project}/tokens", tag = "access",
    params(ProjectPath),
    request_body = CreateToken,
    responses(
        (status = 201, description = "Created; `secret` is shown only now", body = CreatedToken),
        NotProjectAdmin,
        NoSuchVisibleProject,
        (status = 409, description = "A live token has that name", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn create_project_token(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    JsonBody(request): JsonBody<CreateToken>,
) -> Result<impl IntoResponse, ApiError> {
    let created =
        tokens::create_project_token(&state.ctx, &actor, &project, request.into()).await?;
    Ok((StatusCode::CREATED, Json(CreatedToken::from(created))))
}

/// List the project's tokens, newest first, without their secrets (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/tokens", tag = "access",
    params(ProjectPath, ListTokens),
    responses(
        (status = 200, description = "The tokens", body = Page<ApiToken>),
        NotProjectAdmin,
        NoSuchVisibleProject,
    ))]
pub async fn list_project_tokens(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(query): Query<ListTokens>,
) -> Result<Json<Page<ApiToken>>, ApiError> {
    let page = tokens::list_project_tokens(&state.ctx, &actor, &project, &query.into()).await?;
    Ok(Json(page.into()))
}

/// Revoke a project token; it stops working at once (project admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/tokens/{id}", tag = "access",
    params(ProjectItemPath),
    responses(
        (status = 200, description = "Revoked", body = ApiToken),
        NotProjectAdmin,
        (status = 404, description = "No such live token", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn revoke_project_token(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectItemPath { project, id }): Path<ProjectItemPath>,
) -> Result<Json<ApiToken>, ApiError> {
    let id = parse_id(&id, "token")?;
    Ok(Json(
        tokens::revoke_project_token(&state.ctx, &actor, &project, id).await?,
    ))
}

/// Create a platform-admin token (platform admins). The secret is shown once.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "access",
    request_body = CreateToken,
    responses(
        (status = 201, description = "Created; `secret` is shown only now", body = CreatedToken),
        NotPlatformAdmin,
        (status = 409, description = "A live token has that name", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn create_platform_token(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(request): JsonBody<CreateToken>,
) -> Result<impl IntoResponse, ApiError> {
    let created = tokens::create_platform_token(&state.ctx, &actor, request.into()).await?;
    Ok((StatusCode::CREATED, Json(CreatedToken::from(created))))
}

/// List platform-admin tokens, newest first, without their secrets (platform admins).
#[utoipa::path(get, path = "/api/v1/tokens", tag = "access",
    params(ListTokens),
    responses(
        (status = 200, description = "The tokens", body = Page<ApiToken>),
        NotPlatformAdmin,
    ))]
pub async fn list_platform_tokens(
    State(state): State<AppState>,
    actor: Actor,
    Query(query): Query<ListTokens>,
) -> Result<Json<Page<ApiToken>>, ApiError> {
    let page = tokens::list_platform_tokens(&state.ctx, &actor, &query.into()).await?;
    Ok(Json(page.into()))
}

/// Revoke a platform-admin token (platform admins).
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "access",
    params(IdPath),
    responses(
        (status = 200, description = "Revoked", body = ApiToken),
        NotPlatformAdmin,
        (status = 404, description = "No such live token", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn revoke_platform_token(
    State(state): State<AppState>,
    actor: Actor,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<ApiToken>, ApiError> {
    let id = parse_id(&id, "token")?;
    Ok(Json(
        tokens::revoke_platform_token(&state.ctx, &actor, id).await?,
    ))
}

/// Grant a role on the project to an OIDC user or group (project admins).
#[utoipa::path(post, path = "/api/v1/projects/{project}/role-bindings", tag = "access",
    params(ProjectPath),
    request_body = CreateRoleBinding,
    responses(
        (status = 201, description = "Granted", body = RoleBinding),
        NotProjectAdmin,
        NoSuchVisibleProject,
        (status = 409, description = "The subject already has a role", body = Problem, content_type = "application/problem+json"),
        InvalidField,
    ))]
pub async fn create_role_binding(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    JsonBody(request): JsonBody<CreateRoleBinding>,
) -> Result<impl IntoResponse, ApiError> {
    let binding =
        role_bindings::create_role_binding(&state.ctx, &actor, &project, request.into()).await?;
    Ok((StatusCode::CREATED, Json(binding)))
}

/// List the project's role bindings, oldest first (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/role-bindings", tag = "access",
    params(ProjectPath, PageParams),
    responses(
        (status = 200, description = "The bindings", body = Page<RoleBinding>),
        NotProjectAdmin,
        NoSuchVisibleProject,
    ))]
pub async fn list_role_bindings(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(page): Query<PageParams>,
) -> Result<Json<Page<RoleBinding>>, ApiError> {
    let page = role_bindings::list_role_bindings(
        &state.ctx,
        &actor,
        &project,
        page.limit,
        page.cursor.as_deref(),
    )
    .await?;
    Ok(Json(page.into()))
}

/// Remove a role binding (project admins).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/role-bindings/{id}", tag = "access",
    params(ProjectItemPath),
    responses(
        (status = 204, description = "Removed"),
        NotProjectAdmin,
        (status = 404, description = "No such binding", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete_role_binding(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectItemPath { project, id }): Path<ProjectItemPath>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id, "role binding")?;
    role_bindings::delete_role_binding(&state.ctx, &actor, &project, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The project's audit log: tokens, role bindings, the project itself (project admins).
#[utoipa::path(get, path = "/api/v1/projects/{project}/audit", tag = "access",
    params(ProjectPath, PageParams),
    responses(
        (status = 200, description = "A page of audit events, oldest first", body = Page<AuditEvent>),
        NotProjectAdmin,
        NoSuchVisibleProject,
    ))]
pub async fn list_project_audit(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(page): Query<PageParams>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    let page = audit::list_audit_events(
        &state.ctx,
        &actor,
        Some(&project),
        page.limit,
        page.cursor.as_deref(),
    )
    .await?;
    Ok(Json(page.into()))
}

/// The platform's audit log: platform tokens (platform admins).
#[utoipa::path(get, path = "/api/v1/audit", tag = "access",
    params(PageParams),
    responses(
        (status = 200, description = "A page of audit events, oldest first", body = Page<AuditEvent>),
        NotPlatformAdmin,
    ))]
pub async fn list_platform_audit(
    State(state): State<AppState>,
    actor: Actor,
    Query(page): Query<PageParams>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    let page =
        audit::list_audit_events(&state.ctx, &actor, None, page.limit, page.cursor.as_deref())
            .await?;
    Ok(Json(page.into()))
}

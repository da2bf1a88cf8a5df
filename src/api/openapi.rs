//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations.
//!
//! Routes are registered through `OpenApiRouter`, so the served paths and the document
//! cannot drift apart; `openapi/openapi.json` is this document, checked by a test.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::rest::{access, deployments, health, projects};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "modelplane",
        description = "Run LLM and model servers on Kubernetes through one API. \
                       Conventions (paging, errors, ETags, idempotency) are in docs/API-DESIGN.md."
    ),
    tags(
        (name = "projects", description = "Tenants, each mapped to one Kubernetes namespace"),
        (name = "deployments", description = "Model deployments: the spec you ask for and the status the worker reports"),
        (name = "access", description = "API tokens, role bindings for OIDC users and groups, audit logs"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Declares the bearer scheme and requires it on every operation under `/api/v1`.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`mpt_…`) or, when OIDC is configured, a JWT from the identity provider",
                    ))
                    .build(),
            ),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/api/v1/") {
                continue;
            }
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                operation.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
            }
        }
    }
}

/// The routes and their document, with the bearer scheme applied to every protected
/// operation (after the routes are collected, so none can be missed).
pub(super) fn split() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut document) = api_router().split_for_parts();
    BearerAuth.modify(&mut document);
    (router, document)
}

/// Every API route with its documentation.
fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(projects::list_projects, projects::create_project))
        .routes(routes!(projects::get_project, projects::delete_project))
        .routes(routes!(
            deployments::list_deployments,
            deployments::create_deployment
        ))
        .routes(routes!(
            deployments::get_deployment,
            deployments::replace_deployment,
            deployments::patch_deployment,
            deployments::delete_deployment
        ))
        .routes(routes!(deployments::scale_deployment))
        .routes(routes!(deployments::restart_deployment))
        .routes(routes!(deployments::rollback_deployment))
        .routes(routes!(deployments::list_revisions))
        .routes(routes!(deployments::list_deployment_events))
        .routes(routes!(deployments::list_project_events))
        .routes(routes!(access::whoami))
        .routes(routes!(
            access::list_project_tokens,
            access::create_project_token
        ))
        .routes(routes!(access::revoke_project_token))
        .routes(routes!(
            access::list_platform_tokens,
            access::create_platform_token
        ))
        .routes(routes!(access::revoke_platform_token))
        .routes(routes!(
            access::list_role_bindings,
            access::create_role_binding
        ))
        .routes(routes!(access::delete_role_binding))
        .routes(routes!(access::list_project_audit))
        .routes(routes!(access::list_platform_audit))
}

/// The OpenAPI document as pretty JSON with a trailing newline (the committed form).
pub fn openapi_document() -> String {
    let (_, document) = split();
    let mut json = document
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    json.push('\n');
    json
}

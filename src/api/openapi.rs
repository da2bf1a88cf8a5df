//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations.
//!
//! Routes are registered through `OpenApiRouter`, so the served paths and the document
//! cannot drift apart; `openapi/openapi.json` is this document, checked by a test.

use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::rest::{deployments, health, projects};

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
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Every API route with its documentation.
pub(super) fn api_router() -> OpenApiRouter<AppState> {
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
}

/// The OpenAPI document as pretty JSON with a trailing newline (the committed form).
pub fn openapi_document() -> String {
    let (_, document) = api_router().split_for_parts();
    let mut json = document
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    json.push('\n');
    json
}

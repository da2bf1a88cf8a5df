//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` annotations.
//!
//! Routes are registered through `OpenApiRouter`, so the served paths and the document
//! cannot drift apart; `openapi/openapi.json` is this document, checked by a test.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::rest::{
    access, canary, capacity, deployments, health, metrics, model_keys, projects, watch,
};

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
        (name = "canary", description = "A second track of a deployment on a share of its traffic: start, weigh, promote, abort"),
        (name = "metrics", description = "What the model servers serve: requests, tokens, latency, queues, over a window"),
        (name = "capacity", description = "The cluster's GPUs, project quotas and GPU-hours"),
        (name = "access", description = "API tokens, role bindings for OIDC users and groups, audit logs"),
        (name = "keys", description = "Model keys: who may call which model through the Gateway, and how often"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
struct ApiDoc;

/// Operations under `/api/v1` that need no credential: how to sign in.
const PUBLIC: &[&str] = &["/api/v1/auth/config"];

/// Declares the bearer scheme and requires it on every operation under `/api/v1` but the
/// public ones.
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
            if !path.starts_with("/api/v1/") || PUBLIC.contains(&path.as_str()) {
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

/// Documents the responses every protected operation can give whatever its handler does:
/// authentication (401), rate limits (429), authorisation (403), unknown resources (404),
/// the body's syntax, size and type (400, 413, 415), invalid parameters or headers (422),
/// the request timeout (503) and the opaque internal error (500). A test sends each of
/// these to every operation and checks the document names it.
struct CommonResponses;

impl CommonResponses {
    fn problem(description: &str) -> Response {
        ResponseBuilder::new()
            .description(description)
            .content(
                super::error::PROBLEM_JSON,
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build()
    }
}

impl Modify for CommonResponses {
    /// One pass over every operation (~95 lines, most of it the table of which problem
    /// each kind of operation can answer).
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/api/v1/") {
                continue;
            }
            let has_path_params = path.contains('{');
            let methods = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
            ];
            for (method, operation) in methods {
                let Some(operation) = operation else { continue };
                let has_body = operation.request_body.is_some();
                let has_inputs = operation.parameters.as_ref().is_some_and(|params| {
                    params
                        .iter()
                        .any(|p| matches!(p, RefOr::T(p) if !matches!(p.parameter_in, ParameterIn::Path)))
                });
                let public = PUBLIC.contains(&path.as_str());
                // Lists of what the caller may see, `whoami` and `me` never refuse a role.
                let open_to_all = method == "get"
                    && matches!(
                        path.as_str(),
                        "/api/v1/projects" | "/api/v1/whoami" | "/api/v1/projects/{project}/me"
                    );
                let mut add = |code: &str, response: Response| {
                    operation
                        .responses
                        .responses
                        .entry(code.to_owned())
                        .or_insert(RefOr::T(response));
                };
                if !public {
                    add(
                        "401",
                        Self::problem(
                            "Not authenticated: no, an invalid, an expired or a revoked credential",
                        ),
                    );
                }
                let mut limited =
                    Self::problem("Too many requests; retry after `Retry-After` seconds");
                limited.headers.insert(
                    "Retry-After".into(),
                    RefOr::T(
                        HeaderBuilder::new()
                            .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                            .description(Some("Seconds to wait before retrying"))
                            .build(),
                    ),
                );
                add("429", limited);
                add(
                    "500",
                    Self::problem("Internal error; quote the request id when reporting it"),
                );
                add(
                    "503",
                    Self::problem("The request took longer than the server allows"),
                );
                if !open_to_all && !public {
                    add(
                        "403",
                        Self::problem("The caller's role does not allow this"),
                    );
                }
                if has_path_params {
                    add(
                        "404",
                        Self::problem("No such resource, or not visible to the caller"),
                    );
                }
                if has_body {
                    add(
                        "400",
                        Self::problem("The body is not JSON, or repeats a key"),
                    );
                    add("413", Self::problem("The body is larger than 1 MiB"));
                    add(
                        "415",
                        Self::problem(
                            "The body's Content-Type is not the one this operation takes",
                        ),
                    );
                }
                if has_body || has_inputs {
                    add(
                        "422",
                        Self::problem(
                            "A field, parameter or header is invalid; `errors` names each",
                        ),
                    );
                }
            }
        }
    }
}

/// The routes and their document, with the bearer scheme and the common responses applied
/// to every protected operation (after the routes are collected, so none can be missed).
pub(super) fn split() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut document) = api_router().split_for_parts();
    BearerAuth.modify(&mut document);
    CommonResponses.modify(&mut document);
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
        .routes(routes!(deployments::add_adapter))
        .routes(routes!(deployments::remove_adapter))
        .routes(routes!(deployments::restart_deployment))
        .routes(routes!(deployments::rollback_deployment))
        .routes(routes!(canary::start_canary, canary::update_canary))
        .routes(routes!(canary::promote_canary))
        .routes(routes!(canary::abort_canary))
        .routes(routes!(deployments::list_revisions))
        .routes(routes!(deployments::chat_completion))
        .routes(routes!(deployments::list_deployment_events))
        .routes(routes!(deployments::list_project_events))
        .routes(routes!(metrics::deployment_metrics))
        .routes(routes!(metrics::project_metrics))
        .routes(routes!(watch::watch_deployment))
        .routes(routes!(watch::watch_project))
        .routes(routes!(access::whoami))
        .routes(routes!(access::auth_config))
        .routes(routes!(access::my_access))
        .routes(routes!(
            access::list_project_tokens,
            access::create_project_token
        ))
        .routes(routes!(access::revoke_project_token))
        .routes(routes!(model_keys::list_keys, model_keys::create_key))
        .routes(routes!(model_keys::get_key, model_keys::revoke_key))
        .routes(routes!(model_keys::key_usage))
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
        .routes(routes!(capacity::get_capacity))
        .routes(routes!(
            capacity::get_quota,
            capacity::set_quota,
            capacity::delete_quota
        ))
        .routes(routes!(capacity::get_usage))
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

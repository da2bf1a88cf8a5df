//! HTTP front-end: the REST API under `/api/v1`, GraphQL at `/graphql`, health, metrics,
//! the API reference and the portal.

pub mod activator;
mod authn;
pub mod authz;
pub mod error;
pub mod extract;
pub mod graphql;
pub mod middleware;
mod openapi;
mod portal;
pub mod rate_limit;
pub mod request;
pub mod rest;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Method, StatusCode, header};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::timeout::TimeoutLayer;
use utoipa_swagger_ui::SwaggerUi;

use crate::auth::Authenticator;
use crate::config::HttpConfig;
use crate::service;
use rate_limit::RateLimiter;

pub use openapi::openapi_document;

/// Shared by every handler. Axum clones it for every request and for most layers of it, so
/// it is one `Arc`: a clone of the fields was a score of atomic counts up and down, about a
/// twentieth of the API's CPU on a get.
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// What every handler shares (see [`AppState`]).
pub struct SharedState {
    pub ctx: service::Context,
    pub metrics: PrometheusHandle,
    pub auth: Arc<Authenticator>,
    pub limiter: Arc<RateLimiter>,
    /// `/metrics` needs a platform-admin credential when set.
    pub metrics_require_auth: bool,
    /// The change feed, followed once per process, for watchers.
    pub changes: Arc<crate::service::live::ChangeHub>,
    /// The GraphQL schema (the caller is added per request).
    pub graphql: graphql::ModelplaneSchema,
    /// Where GraphiQL's npm packages are.
    pub graphiql_assets: Arc<std::path::Path>,
    /// Where the built portal is (served at `/`).
    pub web_dir: Arc<std::path::Path>,
    /// Forwards "try it" chat calls to model servers.
    pub models: crate::service::chat::ModelClient,
    /// What `/readyz` checks besides the database (the cluster, the worker).
    pub readiness: Arc<[Arc<dyn crate::domain::ReadinessCheck>]>,
}

/// Health and metrics only, for a process that runs just the worker.
pub fn health_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(rest::health::healthz))
        .route("/readyz", axum::routing::get(rest::health::readyz))
        .route("/metrics", axum::routing::get(rest::health::metrics))
        .fallback(rest::not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn(
            middleware::problem_for_bare_errors,
        ))
        .layer(axum::middleware::from_fn(middleware::observe))
}

/// The complete HTTP application.
pub fn router(state: AppState, http: &HttpConfig) -> Router {
    let (api, document) = openapi::split();
    let limiter = state.limiter.clone();
    // Layers run outside in: observe → compression → anonymous limit → problem bodies →
    // timeout → read the body → routes.
    let app = api
        .merge(SwaggerUi::new("/api/docs").url("/api/openapi.json", document))
        .route("/metrics", axum::routing::get(rest::health::metrics))
        .route(
            "/graphql",
            axum::routing::get(graphql::graphql_get).post(graphql::graphql_http),
        )
        .route("/graphql/ws", axum::routing::get(graphql::graphql_ws))
        .route(
            "/graphql/assets/{file}",
            axum::routing::get(graphql::graphiql_asset),
        )
        .fallback(portal::portal)
        .with_state(state)
        .layer(axum::middleware::from_fn(middleware::read_body_first))
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(http.request_timeout_secs),
        ))
        .layer(axum::middleware::from_fn(
            middleware::problem_for_bare_errors,
        ))
        .layer(axum::middleware::from_fn_with_state(
            limiter,
            middleware::limit_anonymous,
        ))
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn(middleware::observe));
    match cors_layer(&http.cors_origins) {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<_> = origins
        .iter()
        .filter(|o| !o.is_empty())
        .filter_map(|o| o.parse().ok())
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                header::IF_MATCH,
                HeaderName::from_static("idempotency-key"),
                HeaderName::from_static(middleware::REQUEST_ID_HEADER),
            ])
            .expose_headers([
                header::ETAG,
                header::LOCATION,
                HeaderName::from_static(middleware::REQUEST_ID_HEADER),
            ]),
    )
}

//! The key check's listener, as the Gateway's `ExternalAuth` filter calls it with the HTTP
//! protocol (Gateway API GEP-1494; the experimental channel's HTTPRoute `externalAuth`):
//! the filter's `path` puts `/check/{deployment id}` in front of the client's path, and the
//! request carries the client's headers (`Authorization` always, `x-api-key` when allowed).
//! A 200 lets the request through, with headers naming the key and its project for the
//! model server's logs (the filter's `allowedResponseHeaders`) and, for Envoy-based
//! Gateways, `x-envoy-auth-headers-to-remove` so the key itself never reaches the model
//! server; any other status is the answer the client gets (Envoy's HTTP ext_authz passes a
//! denial's status, headers and body downstream). The decision is
//! `service::key_check`; errors are OpenAI's shape, as the model server's own would be.
//!
//! The same listener answers Envoy's gRPC protocol (`envoy.service.auth.v3.Authorization`,
//! HTTP/2 in clear text: [`grpc`]) for routes whose filter says `protocol: GRPC`.

mod grpc;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::json;
use uuid::Uuid;

use crate::service::key_check::{KeyCheck, Presented, Verdict};

/// The path prefix the routes' `ExternalAuth` filter sets, before the deployment's id.
pub const PREFIX: &str = "/check";
/// The headers a 200 sets on the request to the model server.
pub const KEY_HEADER: &str = "x-modelplane-key";
pub const KEY_ID_HEADER: &str = "x-modelplane-key-id";
pub const PROJECT_HEADER: &str = "x-modelplane-project";
/// Envoy's: request headers its HTTP ext_authz filter removes before the upstream request.
const REMOVE_HEADER: &str = "x-envoy-auth-headers-to-remove";
/// The client's headers that carry the key: never sent on to the model server.
const KEY_HEADERS: [&str; 2] = ["authorization", "x-api-key"];

/// The key check's routes: the HTTP protocol's, and the gRPC service's.
pub fn router(check: Arc<KeyCheck>) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/{{id}}"), any(root))
        .route(&format!("{PREFIX}/{{id}}/{{*rest}}"), any(below))
        .route_service(grpc::PATH, grpc::service(check.clone()))
        .route("/healthz", axum::routing::get(healthz))
        .fallback(|| async { refuse(StatusCode::NOT_FOUND, "not_found", "no such path") })
        .with_state(check)
}

/// 200 while the check follows the keys; 503 while it refuses every key (the worker's probe
/// says so in the status of each deployment with keys).
async fn healthz(State(check): State<Arc<KeyCheck>>) -> Response {
    if check.following() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the key check cannot follow the keys' changes; it refuses every key\n",
        )
            .into_response()
    }
}

async fn root(
    State(check): State<Arc<KeyCheck>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    decide(&check, &id, &headers).await
}

async fn below(
    State(check): State<Arc<KeyCheck>>,
    Path((id, _)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    decide(&check, &id, &headers).await
}

async fn decide(check: &KeyCheck, id: &str, headers: &HeaderMap) -> Response {
    let started = Instant::now();
    let Ok(deployment) = id.parse::<Uuid>() else {
        return refuse(StatusCode::NOT_FOUND, "not_found", "no such deployment");
    };
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let presented = Presented {
        authorization: text("authorization"),
        api_key: text("x-api-key"),
    };
    let verdict = check.check(presented, deployment).await;
    let (outcome, response) = match verdict {
        Ok(Verdict::Allowed {
            key,
            key_id,
            project,
        }) => {
            let mut response = StatusCode::OK.into_response();
            let h = response.headers_mut();
            for (name, value) in [
                (KEY_HEADER, key),
                (KEY_ID_HEADER, key_id.to_string()),
                (PROJECT_HEADER, project),
            ] {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    h.insert(name, value);
                }
            }
            h.insert(
                REMOVE_HEADER,
                HeaderValue::from_str(&KEY_HEADERS.join(",")).expect("ASCII"),
            );
            ("allowed", response)
        }
        Ok(Verdict::Refused {
            status,
            message,
            retry_after,
        }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
            let (outcome, kind) = outcome_of(status);
            let mut response = refuse(status, kind, &message);
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    "www-authenticate",
                    HeaderValue::from_static("Bearer realm=\"modelplane\""),
                );
            }
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from(seconds));
            }
            (outcome, response)
        }
        Err(err) => {
            // Fail closed: the Gateway refuses what it cannot have checked.
            tracing::error!(error = %err, "key check: database error");
            (
                "error",
                refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the model key cannot be checked right now; retry shortly",
                ),
            )
        }
    };
    measured(outcome, started);
    response
}

/// Counts a check's outcome and time.
fn measured(outcome: &'static str, started: Instant) {
    metrics::counter!(crate::metrics::KEY_CHECKS, "outcome" => outcome).increment(1);
    metrics::histogram!(crate::metrics::KEY_CHECK_SECONDS).record(started.elapsed().as_secs_f64());
}

/// The metric's outcome and OpenAI's error code for a refusal's status.
fn outcome_of(status: StatusCode) -> (&'static str, &'static str) {
    match status {
        StatusCode::UNAUTHORIZED => ("unauthenticated", "invalid_api_key"),
        StatusCode::TOO_MANY_REQUESTS => ("rate_limited", "rate_limit_exceeded"),
        StatusCode::SERVICE_UNAVAILABLE => ("error", "unavailable"),
        _ => ("forbidden", "permission_denied"),
    }
}

/// An OpenAI-shaped error body: `{"error": {"message", "type", "code"}}`.
fn error_body(status: StatusCode, code: &str, message: &str) -> serde_json::Value {
    json!({"error": {"message": message, "type": status.canonical_reason().unwrap_or("error"), "code": code}})
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(error_body(status, code, message))).into_response()
}

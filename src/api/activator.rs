//! The activator's listener: its own port, reached only by the Gateway, through the
//! selector-less Service the worker gives each deployment that scales to zero. The route
//! rewrites a request's path to `/_activator/{deployment id}/{path}`; the logic (hold, wake,
//! the cap) is `service::activation`, the forwarding `service::forward`. Errors are OpenAI's
//! shape (`{"error": {"message", "type", "code"}}`), as the model server's own would be.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::json;
use uuid::Uuid;

use crate::service::ServiceError;
use crate::service::activation::{ActivationError, Activator};
use crate::service::chat::ModelClient;
use crate::service::forward::Forward;

/// The path prefix the worker's activator route rewrites to.
pub const PREFIX: &str = "/_activator";

#[derive(Clone)]
struct ActivatorState {
    activator: Arc<Activator>,
    models: ModelClient,
    max_body_bytes: usize,
}

/// The activator's routes.
pub fn router(activator: Arc<Activator>, models: ModelClient, max_body_bytes: usize) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/{{id}}"), any(root))
        .route(&format!("{PREFIX}/{{id}}/{{*rest}}"), any(below))
        .fallback(|| async { refuse(StatusCode::NOT_FOUND, "not_found", "no such path") })
        .with_state(ActivatorState {
            activator,
            models,
            max_body_bytes,
        })
}

async fn root(
    State(state): State<ActivatorState>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    hold(state, &id, "", method, uri, headers, body).await
}

async fn below(
    State(state): State<ActivatorState>,
    Path((id, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    hold(state, &id, &rest, method, uri, headers, body).await
}

/// Holds one request until its deployment has a replica, then forwards it.
async fn hold(
    state: ActivatorState,
    id: &str,
    rest: &str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(id) = id.parse::<Uuid>() else {
        return refuse(StatusCode::NOT_FOUND, "not_found", "no such deployment");
    };
    // The body first: a request too large to hold is refused before it counts.
    let body = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(body) => body,
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                &format!(
                    "the request body is larger than the {} bytes the activator holds",
                    state.max_body_bytes
                ),
            );
        }
    };
    let woken = match state.activator.wake(id).await {
        Ok(woken) => woken,
        Err(err) => return activation_refused(err),
    };
    let path_and_query = match uri.query() {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    let forwarded = state
        .models
        .forward(Forward {
            namespace: &woken.namespace,
            service: &woken.name,
            port: woken.port,
            method,
            path_and_query: &path_and_query,
            headers,
            body: body.to_vec(),
        })
        .await;
    drop(woken.held);
    match forwarded {
        Ok(answer) => {
            outcome("forwarded");
            answer.map(Body::new)
        }
        Err(ServiceError::ModelUnreachable { message }) => {
            refuse(StatusCode::BAD_GATEWAY, "unreachable", &message)
        }
        Err(err) => refuse(StatusCode::BAD_GATEWAY, "unreachable", &err.to_string()),
    }
}

fn activation_refused(err: ActivationError) -> Response {
    let message = err.to_string();
    match err {
        ActivationError::NotFound => refuse(StatusCode::NOT_FOUND, "not_found", &message),
        ActivationError::NotServing { .. } => {
            refuse(StatusCode::SERVICE_UNAVAILABLE, "not_serving", &message)
        }
        ActivationError::TooMany { .. } => with_retry_after(
            refuse(StatusCode::TOO_MANY_REQUESTS, "too_many", &message),
            1,
        ),
        ActivationError::TimedOut { .. } => with_retry_after(
            refuse(StatusCode::SERVICE_UNAVAILABLE, "timed_out", &message),
            10,
        ),
        ActivationError::Database(err) => {
            tracing::error!(error = %err, "activator: database error");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "unreachable",
                "the activator cannot read its database; retry shortly",
            )
        }
    }
}

fn outcome(outcome: &'static str) {
    metrics::counter!(crate::metrics::ACTIVATOR_REQUESTS, "outcome" => outcome).increment(1);
}

/// An OpenAI-shaped error answer; counted by its outcome.
fn refuse(status: StatusCode, what: &'static str, message: &str) -> Response {
    outcome(what);
    let body = json!({"error": {
        "message": message,
        "type": status.canonical_reason().unwrap_or("error"),
        "code": status.as_u16(),
    }});
    (status, axum::Json(body)).into_response()
}

fn with_retry_after(mut response: Response, seconds: u32) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

//! REST handlers: parse the request, call the service layer, shape the response.

pub mod access;
pub mod canary;
pub mod capacity;
pub mod deployments;
pub mod health;
pub mod metrics;
pub mod model_keys;
pub mod projects;
pub mod responses;
pub mod watch;
pub mod wire;

use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::error::problem_response;
use super::middleware::current_request_id;

/// Unknown paths get a problem document rather than an empty 404.
pub async fn not_found(uri: Uri) -> Response {
    problem_response(
        StatusCode::NOT_FOUND,
        "not-found",
        "Not found",
        format!("no route for {}", uri.path()),
        current_request_id(),
        Vec::new(),
    )
}

//! REST handlers: parse the request, call the service layer, shape the response.

pub mod deployments;
pub mod health;
pub mod projects;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::error::{ApiError, problem_response};
use super::middleware::current_request_id;
use crate::service::Actor;

/// Who is calling. Authentication is not configured yet, so everyone is `anonymous`.
impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Actor::anonymous())
    }
}

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

//! The [`Actor`] extractor: authenticates every protected request, then rate-limits it.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::auth::AuthError;
use crate::service::Actor;

impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match state.auth.authenticate(header).await {
            Ok(actor) => {
                state
                    .limiter
                    .check(&actor.key())
                    .map_err(ApiError::RateLimited)?;
                tracing::Span::current().record("actor", actor.name());
                Ok(actor)
            }
            Err(AuthError::Internal(err)) => Err(ApiError::Internal(Box::new(err))),
            Err(err) => {
                // Failed attempts count against the client address, which slows guessing.
                let client = parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|c| c.0.ip().to_string())
                    .unwrap_or_else(|| "unknown".into());
                state
                    .limiter
                    .check(&format!("ip:{client}"))
                    .map_err(ApiError::RateLimited)?;
                Err(ApiError::Unauthorized(err.to_string()))
            }
        }
    }
}

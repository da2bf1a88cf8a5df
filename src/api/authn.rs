//! The [`Actor`] extractor: rate-limits, then authenticates every protected request.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use crate::auth::AuthError;
use crate::service::{Actor, Identity};

impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let client = super::middleware::client_address(&parts.extensions);
        // Both checks come before the database: a flood costs a hash, not a query.
        state
            .limiter
            .penalty(&client)
            .map_err(ApiError::RateLimited)?;
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if let Some(credential) = header {
            let key = hex::encode(&Sha256::digest(credential.as_bytes())[..16]);
            state
                .limiter
                .check(&format!("credential:{key}"))
                .map_err(ApiError::RateLimited)?;
        }
        match state.auth.authenticate(header).await {
            Ok(actor) => {
                // One user may present many tokens over time (OIDC): limit the user too.
                if matches!(actor.identity, Identity::User { .. }) {
                    state
                        .limiter
                        .check(&actor.key())
                        .map_err(ApiError::RateLimited)?;
                }
                tracing::Span::current().record("actor", actor.name());
                Ok(actor)
            }
            Err(AuthError::Internal(err)) => Err(ApiError::Internal(Box::new(err))),
            Err(err) => {
                // Failed attempts count against the client address, which slows guessing.
                state
                    .limiter
                    .check_failure(&client)
                    .map_err(ApiError::RateLimited)?;
                Err(ApiError::Unauthorized(err.to_string()))
            }
        }
    }
}

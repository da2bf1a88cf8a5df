//! The [`Actor`] extractor: rate-limits, then authenticates every protected request.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

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
        let client = super::middleware::client_address(&parts.extensions);
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // The credential itself, however the header spells the scheme or pads it, so
        // respelling the header cannot buy a fresh bucket.
        let credential = header.map(|h| {
            let token = h.split_once(' ').map_or(h, |(_, rest)| rest).trim();
            hex::encode(&Sha256::digest(token.as_bytes())[..16])
        });
        // Both checks come before the database: a flood costs a hash, not a query. An address
        // refused for failed attempts is refused outright, except for a credential that
        // recently proved good (others behind the same address keep working).
        if !credential
            .as_ref()
            .is_some_and(|key| state.limiter.is_known_good(key))
        {
            state
                .limiter
                .penalty(&client)
                .map_err(ApiError::RateLimited)?;
        }
        if let Some(key) = &credential {
            state
                .limiter
                .check(&format!("credential:{key}"))
                .map_err(ApiError::RateLimited)?;
        }
        match state.auth.authenticate(header).await {
            Ok(actor) => {
                // Per caller too (a user may present many tokens over time).
                state
                    .limiter
                    .check(&actor.key())
                    .map_err(ApiError::RateLimited)?;
                if let Some(key) = &credential {
                    state.limiter.remember_good(key);
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

//! Authentication: turns an `Authorization: Bearer …` credential into an [`Actor`].
//!
//! Two kinds of credential: modelplane API tokens (`mpt_…`, looked up by their SHA-256
//! hash) and, when OIDC is configured, JWTs from the identity provider.

pub mod oidc;

use chrono::Utc;
use sqlx::PgPool;

use crate::domain::TokenRole;
use crate::service::Actor;
use crate::service::tokens::{TOKEN_PREFIX, hash_secret};
use crate::store;

pub use oidc::{OidcConfig, OidcVerifier};

/// Why a request is not authenticated. Messages never contain the credential.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("{0}")]
    Invalid(String),
    #[error("authentication failed: {0}")]
    Internal(#[from] sqlx::Error),
}

/// Resolves credentials; shared by every request.
pub struct Authenticator {
    pool: PgPool,
    oidc: Option<OidcVerifier>,
}

impl Authenticator {
    pub fn new(pool: PgPool, oidc: Option<OidcVerifier>) -> Self {
        Self { pool, oidc }
    }

    /// Authenticates the value of an `Authorization` header.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Actor, AuthError> {
        let header = authorization.ok_or(AuthError::Missing)?;
        let credential = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                AuthError::Invalid("the Authorization header must be `Bearer <token>`".into())
            })?;
        if credential.starts_with(TOKEN_PREFIX) || self.oidc.is_none() {
            return self.authenticate_token(credential).await;
        }
        let oidc = self.oidc.as_ref().expect("checked above");
        oidc.verify(credential).await.map_err(AuthError::Invalid)
    }

    async fn authenticate_token(&self, secret: &str) -> Result<Actor, AuthError> {
        let invalid = || AuthError::Invalid("the token is not valid".into());
        let grant = store::tokens::find_token_by_hash(&self.pool, &hash_secret(secret))
            .await?
            .ok_or_else(invalid)?;
        if grant.revoked_at.is_some() {
            return Err(AuthError::Invalid("the token was revoked".into()));
        }
        if grant.expires_at.is_some_and(|at| at <= Utc::now()) {
            return Err(AuthError::Invalid("the token has expired".into()));
        }
        let role: TokenRole = grant.role.parse().map_err(|_| invalid())?;
        store::tokens::touch_token(&self.pool, grant.id).await?;
        Ok(Actor::token(grant.id, &grant.name, grant.project_id, role))
    }
}

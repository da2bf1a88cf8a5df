//! Authentication: turns an `Authorization: Bearer …` credential into an [`Actor`].
//!
//! Two kinds of credential: modelplane API tokens (`mpt_…`, looked up by their SHA-256
//! hash) and, when OIDC is configured, JWTs from the identity provider.

pub mod oidc;

use crate::service::tokens::{TOKEN_PREFIX, TokenCheck, check_token};
use crate::service::{self, Actor, ServiceError};

pub use oidc::{OidcConfig, OidcVerifier};

/// Why a request is not authenticated. Messages never contain the credential.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("{0}")]
    Invalid(String),
    #[error("authentication failed: {0}")]
    Internal(#[from] ServiceError),
}

/// How to sign in. API tokens always work; `oidc` says whether the portal signs people in
/// with the company's identity provider, and how.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignInConfig {
    /// `null` when the portal has no single sign-on (OIDC off, or no portal client id).
    pub oidc: Option<OidcSignIn>,
}

/// What a browser needs for the Authorization Code flow with PKCE, as a public client.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcSignIn {
    /// The issuer; its discovery document is at `{issuer}/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    /// The audience (`aud`) the API accepts.
    pub audience: String,
    pub scopes: Vec<String>,
    /// The claim that names the user in role bindings.
    pub username_claim: String,
    /// The claim that lists the user's groups.
    pub groups_claim: String,
}

/// Resolves credentials; shared by every request.
pub struct Authenticator {
    ctx: service::Context,
    oidc: Option<OidcVerifier>,
}

impl Authenticator {
    pub fn new(ctx: service::Context, oidc: Option<OidcVerifier>) -> Self {
        Self { ctx, oidc }
    }

    /// How to sign in, for `GET /api/v1/auth/config`: nothing secret.
    pub fn sign_in(&self) -> SignInConfig {
        let oidc = self.oidc.as_ref().map(OidcVerifier::config);
        SignInConfig {
            oidc: oidc.and_then(|c| {
                Some(OidcSignIn {
                    issuer: c.issuer.clone(),
                    client_id: c.client_id.clone()?,
                    audience: c.audience.clone(),
                    scopes: c.scopes.clone(),
                    username_claim: c.username_claim.clone(),
                    groups_claim: c.groups_claim.clone(),
                })
            }),
        }
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
        match check_token(&self.ctx, secret).await? {
            TokenCheck::Valid(actor) => Ok(actor),
            TokenCheck::Rejected(why) => Err(AuthError::Invalid(why.into())),
        }
    }
}

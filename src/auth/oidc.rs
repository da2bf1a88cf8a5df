//! OIDC: validates JWTs from the identity provider (issuer, audience, expiry, signature).
//!
//! Keys come from a JWKS file or URL. An unknown key id triggers one reload (at most
//! every few seconds), which is how key rotation at the provider is picked up.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use tokio::sync::RwLock;

use crate::service::Actor;

const MIN_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Where the signing keys are published.
#[derive(Debug, Clone)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

#[derive(Debug, Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub audience: String,
    pub jwks: JwksSource,
    /// Claim naming the user in `user` role bindings and audit logs (default `sub`).
    pub username_claim: String,
    /// Claim listing the user's groups (default `groups`).
    pub groups_claim: String,
    /// Members of these groups are platform admins.
    pub platform_admin_groups: Vec<String>,
    /// The portal's client id, when the portal signs in with the provider.
    pub client_id: Option<String>,
    /// The scopes the portal asks for.
    pub scopes: Vec<String>,
}

pub struct OidcVerifier {
    config: OidcConfig,
    http: reqwest::Client,
    keys: RwLock<(JwkSet, Option<Instant>)>,
}

impl OidcVerifier {
    /// Loads the keys once, so a misconfiguration fails at start-up.
    pub async fn new(config: OidcConfig) -> Result<Self, String> {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client for JWKS: {e}"))?;
        let verifier = Self {
            config,
            http,
            keys: RwLock::new((JwkSet { keys: Vec::new() }, None)),
        };
        let keys = verifier.fetch_keys().await?;
        *verifier.keys.write().await = (keys, Some(Instant::now()));
        Ok(verifier)
    }

    async fn fetch_keys(&self) -> Result<JwkSet, String> {
        let text = match &self.config.jwks {
            JwksSource::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|e| format!("cannot read the JWKS file {}: {e}", path.display()))?,
            JwksSource::Url(url) => self
                .http
                .get(url)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| format!("cannot fetch the JWKS from {url}: {e}"))?
                .text()
                .await
                .map_err(|e| format!("cannot read the JWKS from {url}: {e}"))?,
        };
        serde_json::from_str(&text).map_err(|e| format!("the JWKS is not valid: {e}"))
    }

    /// Reloads the keys unless that happened very recently.
    async fn reload(&self) {
        let mut keys = self.keys.write().await;
        if keys.1.is_some_and(|at| at.elapsed() < MIN_RELOAD_INTERVAL) {
            return;
        }
        match self.fetch_keys().await {
            Ok(fresh) => *keys = (fresh, Some(Instant::now())),
            Err(err) => {
                tracing::warn!(error = %err, "OIDC key reload failed; keeping the old keys");
                keys.1 = Some(Instant::now());
            }
        }
    }

    async fn key_for(&self, kid: Option<&str>) -> Option<DecodingKey> {
        let find = |set: &JwkSet| {
            let jwk = match kid {
                Some(kid) => set.find(kid),
                None if set.keys.len() == 1 => set.keys.first(),
                None => None,
            };
            jwk.and_then(|j| DecodingKey::from_jwk(j).ok())
        };
        if let Some(key) = find(&self.keys.read().await.0) {
            return Some(key);
        }
        self.reload().await;
        find(&self.keys.read().await.0)
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Validates a JWT and returns the user it names. Errors say why, never the token.
    pub async fn verify(&self, token: &str) -> Result<Actor, String> {
        let header = decode_header(token).map_err(|_| "the token is not valid".to_owned())?;
        // Only asymmetric algorithms: a shared-secret (HS*) token could be forged with the public key.
        let allowed = [
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
            Algorithm::ES256,
            Algorithm::ES384,
            Algorithm::EdDSA,
        ];
        if !allowed.contains(&header.alg) {
            return Err(format!("token algorithm {:?} is not accepted", header.alg));
        }
        let key = self
            .key_for(header.kid.as_deref())
            .await
            .ok_or_else(|| "the token is signed by an unknown key".to_owned())?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = 30;
        let data = decode::<serde_json::Value>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
                ErrorKind::InvalidIssuer => "the token's issuer is not accepted".to_owned(),
                ErrorKind::InvalidAudience => "the token's audience is not accepted".to_owned(),
                ErrorKind::InvalidSignature => "the token's signature is not valid".to_owned(),
                _ => "the token is not valid".to_owned(),
            }
        })?;
        let claims = data.claims;
        let claim = self.config.username_claim.as_str();
        let username = claims[claim]
            .as_str()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("the token has no `{claim}` claim"))?;
        let groups: Vec<String> = claims[self.config.groups_claim.as_str()]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let platform_admin = groups
            .iter()
            .any(|g| self.config.platform_admin_groups.contains(g));
        let actor = Actor::user(username, groups, platform_admin);
        // `exp` is required above; a stream opened with the token ends when it does.
        Ok(match claims["exp"].as_i64() {
            Some(exp) => actor.expiring_at(exp),
            None => actor,
        })
    }
}

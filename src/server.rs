//! Process roles: serve the API, migrate the database.

use std::net::SocketAddr;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::api::rate_limit::RateLimiter;
use crate::api::{self, AppState};
use crate::auth::oidc::JwksSource;
use crate::auth::{Authenticator, OidcConfig, OidcVerifier};
use crate::config::{AuthConfig, DatabaseConfig, ServeConfig};
use crate::domain::SpecLimits;
use crate::service;
use crate::store;

/// Why the process could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot connect to the database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot store the bootstrap token: {0}")]
    Bootstrap(#[from] service::ServiceError),
}

/// `modelplane migrate`
pub async fn migrate(config: &DatabaseConfig) -> Result<(), StartupError> {
    let pool = store::connect(config.database_url.expose(), 2).await?;
    store::migrate(&pool).await?;
    tracing::info!("migrations applied");
    Ok(())
}

/// `modelplane serve`: migrate, then serve HTTP until SIGINT or SIGTERM.
pub async fn serve(config: ServeConfig, metrics: PrometheusHandle) -> Result<(), StartupError> {
    let pool = store::connect(
        config.database.database_url.expose(),
        config.database.db_max_connections,
    )
    .await?;
    store::migrate(&pool).await?;
    let ctx = service::Context {
        pool: pool.clone(),
        limits: SpecLimits {
            max_replicas: config.max_replicas,
        },
    };
    if let Some(token) = &config.auth.bootstrap_token {
        if token.expose().len() < 32 {
            return Err(StartupError::Config(
                "MODELPLANE_BOOTSTRAP_TOKEN must be at least 32 characters".into(),
            ));
        }
        if service::tokens::ensure_bootstrap_token(&ctx, token.expose()).await? {
            tracing::info!("bootstrap platform-admin token stored from configuration");
        }
    }
    let oidc = oidc_verifier(&config.auth).await?;
    let state = AppState {
        ctx,
        metrics,
        auth: Arc::new(Authenticator::new(pool, oidc)),
        limiter: Arc::new(RateLimiter::new(
            config.auth.rate_limit_per_minute,
            config.auth.rate_limit_burst,
        )),
        metrics_require_auth: config.auth.metrics_require_auth,
    };
    let app = api::router(state, &config.http);
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartupError::Listen {
                addr: config.listen,
                source,
            })?;
    let addr = listener.local_addr().map_err(StartupError::Serve)?;
    tracing::info!(%addr, "modelplane API listening: REST at http://{addr}/api/v1, reference at http://{addr}/api/docs");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
    .map_err(StartupError::Serve)
}

/// The OIDC verifier, when issuer, audience and keys are all configured.
async fn oidc_verifier(auth: &AuthConfig) -> Result<Option<OidcVerifier>, StartupError> {
    let jwks = match (&auth.oidc_jwks_file, &auth.oidc_jwks_url) {
        (Some(file), _) => Some(JwksSource::File(file.clone())),
        (None, Some(url)) => Some(JwksSource::Url(url.clone())),
        (None, None) => None,
    };
    match (&auth.oidc_issuer, &auth.oidc_audience, jwks) {
        (None, None, None) => Ok(None),
        (Some(issuer), Some(audience), Some(jwks)) => {
            let config = OidcConfig {
                issuer: issuer.clone(),
                audience: audience.clone(),
                jwks,
                username_claim: auth.oidc_username_claim.clone(),
                groups_claim: auth.oidc_groups_claim.clone(),
                platform_admin_groups: auth.oidc_platform_admin_groups.clone(),
            };
            let verifier = OidcVerifier::new(config).await.map_err(StartupError::Config)?;
            tracing::info!(%issuer, "OIDC enabled");
            Ok(Some(verifier))
        }
        _ => Err(StartupError::Config(
            "OIDC needs all of MODELPLANE_OIDC_ISSUER, MODELPLANE_OIDC_AUDIENCE and a JWKS file or URL".into(),
        )),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

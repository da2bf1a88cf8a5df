//! Process roles: serve the API, migrate the database.

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::config::{DatabaseConfig, ServeConfig};
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
    let state = AppState {
        ctx: service::Context {
            pool,
            limits: SpecLimits {
                max_replicas: config.max_replicas,
            },
        },
        metrics,
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
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(StartupError::Serve)
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

//! Liveness, readiness and Prometheus metrics.

use axum::Json;
use axum::extract::State;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::store;

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, `ready` or `unavailable`.
    pub status: String,
    /// Each dependency checked, with `ok` or what is wrong.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<HealthCheck>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthCheck {
    pub name: String,
    pub ok: bool,
    pub message: String,
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        checks: Vec::new(),
    })
}

/// The database answers, every migration is applied, and the cluster (when this process
/// drives one) answers.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready to serve", body = Health),
        (status = 503, description = "A dependency is not ready", body = Health),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let database = match store::migrations_applied(&state.ctx.pool).await {
        Ok(true) => HealthCheck {
            name: "database".into(),
            ok: true,
            message: "reachable, migrations applied".into(),
        },
        Ok(false) => HealthCheck {
            name: "database".into(),
            ok: false,
            message: "reachable, but migrations are pending".into(),
        },
        Err(err) => {
            tracing::warn!(error = %err, "readiness: database check failed");
            HealthCheck {
                name: "database".into(),
                ok: false,
                message: format!("unreachable: {err}"),
            }
        }
    };
    let mut checks = vec![database];
    if let Some(cluster) = &state.cluster {
        checks.push(match cluster.client.apiserver_version().await {
            Ok(version) => HealthCheck {
                name: "cluster".into(),
                ok: true,
                message: format!(
                    "reachable: {} (Kubernetes {}.{})",
                    cluster.description, version.major, version.minor
                ),
            },
            Err(err) => HealthCheck {
                name: "cluster".into(),
                ok: false,
                message: format!("unreachable: {} ({err})", cluster.description),
            },
        });
    }
    let ready = checks.iter().all(|c| c.ok);
    let body = Health {
        status: if ready { "ready" } else { "unavailable" }.into(),
        checks,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Prometheus text exposition of the process's metrics; open unless configured otherwise.
pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if state.metrics_require_auth {
        let header = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
        match state.auth.authenticate(header).await {
            Ok(actor) if actor.is_platform_admin() => {}
            Ok(_) => {
                return ApiError::Forbidden("metrics need the platform-admin role".into())
                    .into_response();
            }
            Err(err) => return ApiError::Unauthorized(err.to_string()).into_response(),
        }
    }
    if let Ok(depth) = store::work_queue::count_queued(&state.ctx.pool).await {
        metrics::gauge!("modelplane_reconcile_queue_depth").set(depth as f64);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

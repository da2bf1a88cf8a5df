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
use crate::domain::CheckResult;
use crate::service;

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok` (liveness), `ready`, `degraded` (ready, but an optional check fails) or `unavailable`.
    pub status: String,
    /// Each dependency checked, with `ok` or what is wrong.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<HealthCheck>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthCheck {
    pub name: String,
    pub ok: bool,
    /// Whether a failure of this check makes the process unready (503).
    pub required: bool,
    pub message: String,
}

/// How long one readiness check may take before it counts as failed.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        checks: Vec::new(),
    })
}

/// Ready when the database answers with every migration applied and, in a process that
/// runs the worker, the worker's loop is alive. The cluster is checked
/// too and reported, but it only decides readiness for a worker-only process: the API
/// serves without the cluster, so a slow cluster must not take API replicas out of their
/// load balancer. Each check has its own short timeout, run side by side.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready to serve", body = Health),
        (status = 503, description = "A required dependency is not ready", body = Health),
    ))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let database = async {
        let (ok, message) =
            match tokio::time::timeout(CHECK_TIMEOUT, service::health::database_ready(&state.ctx))
                .await
            {
                Ok(Ok(true)) => (true, "reachable, migrations applied".to_owned()),
                Ok(Ok(false)) => (false, "reachable, but migrations are pending".to_owned()),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "readiness: database check failed");
                    (false, format!("unreachable: {err}"))
                }
                Err(_) => (
                    false,
                    format!("no answer within {} s", CHECK_TIMEOUT.as_secs()),
                ),
            };
        vec![HealthCheck {
            name: "database".into(),
            ok,
            required: true,
            message,
        }]
    };
    // Each check bounds its own calls; this bound only guards against one that does not.
    let others = state.readiness.iter().map(|check| async move {
        match tokio::time::timeout(CHECK_TIMEOUT * 2, check.check()).await {
            Ok(results) => results.into_iter().map(HealthCheck::from).collect(),
            Err(_) => vec![HealthCheck {
                name: "readiness".into(),
                ok: false,
                required: true,
                message: format!(
                    "a check gave no answer within {} s",
                    (CHECK_TIMEOUT * 2).as_secs()
                ),
            }],
        }
    });
    let (database, others) = tokio::join!(database, futures::future::join_all(others));
    let checks: Vec<HealthCheck> = database
        .into_iter()
        .chain(others.into_iter().flatten())
        .collect();
    let ready = checks.iter().all(|c| c.ok || !c.required);
    let status = if !ready {
        "unavailable"
    } else if checks.iter().all(|c| c.ok) {
        "ready"
    } else {
        "degraded"
    };
    let body = Health {
        status: status.into(),
        checks,
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

impl From<CheckResult> for HealthCheck {
    fn from(c: CheckResult) -> Self {
        Self {
            name: c.name,
            ok: c.ok,
            required: c.required,
            message: c.message,
        }
    }
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
    if let Ok(depth) = service::health::queue_depth(&state.ctx).await {
        metrics::gauge!(crate::metrics::QUEUE_DEPTH).set(depth as f64);
    }
    crate::metrics::record_pool(&state.ctx.pool, "api");
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

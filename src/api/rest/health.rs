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
            match tokio::time::timeout(CHECK_TIMEOUT, store::migrations_applied(&state.ctx.pool))
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
        HealthCheck {
            name: "database".into(),
            ok,
            required: true,
            message,
        }
    };
    let cluster = async {
        let cluster = state.cluster.as_ref()?;
        let (ok, message) =
            match tokio::time::timeout(CHECK_TIMEOUT, cluster.client.apiserver_version()).await {
                Ok(Ok(version)) => (
                    true,
                    format!(
                        "reachable: {} (Kubernetes {}.{})",
                        cluster.description, version.major, version.minor
                    ),
                ),
                Ok(Err(err)) => (
                    false,
                    format!("unreachable: {} ({err})", cluster.description),
                ),
                Err(_) => (
                    false,
                    format!(
                        "no answer within {} s: {}",
                        CHECK_TIMEOUT.as_secs(),
                        cluster.description
                    ),
                ),
            };
        Some(HealthCheck {
            name: "cluster".into(),
            ok,
            required: state.cluster_gates_readiness,
            message,
        })
    };
    let (database, mut cluster) = tokio::join!(database, cluster);
    let report = state.worker.as_ref().map(|w| w.report());
    // A live `/version` says nothing of a failing write path: the worker's last results do.
    if let (Some(check), Some(failing)) = (
        cluster.as_mut(),
        report.as_ref().and_then(|r| r.cluster_failing.as_ref()),
    ) && check.ok
    {
        check.ok = false;
        check.message = format!(
            "{}; but the last reconcile failed: {failing}",
            check.message
        );
    }
    let worker = report.map(|r| HealthCheck {
        name: "worker".into(),
        ok: r.alive,
        required: true,
        message: r.message,
    });
    let checks: Vec<HealthCheck> = std::iter::once(database)
        .chain(cluster)
        .chain(worker)
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
        metrics::gauge!(crate::telemetry::QUEUE_DEPTH).set(depth as f64);
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

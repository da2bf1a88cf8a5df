//! `…/deployments/{name}/metrics` and `…/projects/{project}/metrics`: what the model
//! servers served over a window (the current reading is `status.load` on the deployment).

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::IntoParams;

use super::responses::{DeploymentPath, NoSuchDeployment, NoSuchProject, ProjectPath};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::Query;
use crate::domain::Metrics;
use crate::service::Actor;
use crate::service::load::{self as service, MetricsQuery};

/// The window, step and series of a metrics read.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MetricsParams {
    /// How far back: a number and `s`, `m`, `h` or `d` (default `1h`, at most `30d`).
    /// Windows up to 24 h read the 15 s readings; longer ones the 5-minute rollups.
    pub window: Option<String>,
    /// The width of one point (default: the window / 60, at least the stored resolution;
    /// at most 1,000 points).
    pub step: Option<String>,
    /// Comma-separated series (default: all): `requestsPerSecond`, `promptTokensPerSecond`,
    /// `generationTokensPerSecond`, `ttftP50Seconds`, `ttftP95Seconds`,
    /// `interTokenLatencyP50Seconds`, `e2eLatencyP95Seconds`, `waiting`, `running`,
    /// `kvCacheUsage`, `errorRate`, `replicas`.
    pub series: Option<String>,
    /// A deployment's track: `all` (default: every pod), `stable` or `canary`. Not for a
    /// project's metrics.
    pub track: Option<String>,
}

impl From<MetricsParams> for MetricsQuery {
    fn from(p: MetricsParams) -> Self {
        Self {
            window: p.window,
            step: p.step,
            series: p.series,
            track: p.track,
        }
    }
}

/// A deployment's serving metrics over a window, one value (or `null`: nothing measured)
/// per step for each series: requests/s, tokens/s in and out, time to first token,
/// inter-token and end-to-end latency, queue, running, KV-cache use, error rate, replicas.
///
/// Within a step, rates and gauges are averaged, medians averaged, 95th percentiles the
/// highest reading (a bound, not a percentile of the step), replicas the most.
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/metrics", tag = "metrics",
    params(DeploymentPath, MetricsParams),
    responses(
        (status = 200, description = "The series, column-oriented", body = Metrics),
        NoSuchDeployment,
    ))]
pub async fn deployment_metrics(
    State(state): State<AppState>,
    actor: Actor,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    Query(params): Query<MetricsParams>,
) -> Result<Json<Metrics>, ApiError> {
    let query = MetricsQuery::from(params);
    Ok(Json(
        service::deployment_metrics(&state.ctx, &actor, &project, &name, &query).await?,
    ))
}

/// A project's serving metrics over a window, summed over its deployments (those deleted
/// within the window included): rates, queues and replicas added, KV-cache use averaged,
/// medians and the error rate weighted by each deployment's requests, 95th percentiles the
/// highest deployment's.
#[utoipa::path(get, path = "/api/v1/projects/{project}/metrics", tag = "metrics",
    params(ProjectPath, MetricsParams),
    responses(
        (status = 200, description = "The series, column-oriented", body = Metrics),
        NoSuchProject,
    ))]
pub async fn project_metrics(
    State(state): State<AppState>,
    actor: Actor,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(params): Query<MetricsParams>,
) -> Result<Json<Metrics>, ApiError> {
    let query = MetricsQuery::from(params);
    Ok(Json(
        service::project_metrics(&state.ctx, &actor, &project, &query).await?,
    ))
}

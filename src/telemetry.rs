//! Tracing and metrics, set up once per process.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global tracing subscriber.
pub fn init_tracing(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|err| {
        eprintln!(
            "invalid MODELPLANE_LOG `{}` ({err}); using `info`",
            config.log
        );
        EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}

/// Installs the global Prometheus recorder and returns the handle `/metrics` renders.
pub fn init_metrics() -> PrometheusHandle {
    PrometheusBuilder::new()
        .install_recorder()
        .expect("the metrics recorder is installed once per process")
}

// Every metric's name, in one place (each with its labels and meaning).
/// Counter: HTTP requests by `method` (standard methods, else `OTHER`), `route` (the matched
/// route template, or `unmatched`) and `status`.
pub const HTTP_REQUESTS: &str = "modelplane_http_requests_total";
/// Histogram: HTTP request latency in seconds, same labels.
pub const HTTP_REQUEST_DURATION: &str = "modelplane_http_request_duration_seconds";
/// Counter: GraphQL operations over HTTP by `outcome` (`ok`, `error`).
pub const GRAPHQL_REQUESTS: &str = "modelplane_graphql_requests_total";
/// Counter: Kubernetes API requests by `verb` and `kind`.
pub const KUBERNETES_REQUESTS: &str = "modelplane_kubernetes_requests_total";
/// Counter: reconciles by `outcome` (`ok`, `error`).
pub const RECONCILES: &str = "modelplane_reconcile_total";
/// Counter: reconcile errors by `kind` (`api_refused`, `cluster_unreachable`, `database`,
/// `timeout`, `internal`, `config`).
pub const RECONCILE_ERRORS: &str = "modelplane_reconcile_errors_total";
/// Histogram: reconcile duration in seconds.
pub const RECONCILE_DURATION: &str = "modelplane_reconcile_duration_seconds";
/// Gauge: work items queued.
pub const QUEUE_DEPTH: &str = "modelplane_reconcile_queue_depth";
/// Gauge: age in seconds of the oldest due work item.
pub const QUEUE_OLDEST_AGE: &str = "modelplane_reconcile_oldest_item_age_seconds";
/// Gauge: Unix time of the worker loop's last beat.
pub const WORKER_HEARTBEAT: &str = "modelplane_worker_heartbeat_timestamp_seconds";

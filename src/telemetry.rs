//! Tracing and the metrics recorder, set up once per process (metric names: [`crate::metrics`]).

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

/// Installs the global Prometheus recorder, describes every metric of [`crate::metrics`],
/// and returns the handle `/metrics` renders.
pub fn init_metrics() -> PrometheusHandle {
    let handle = PrometheusBuilder::new()
        .set_buckets(crate::metrics::DURATION_BUCKETS)
        .expect("the buckets are not empty")
        .install_recorder()
        .expect("the metrics recorder is installed once per process");
    crate::metrics::describe();
    handle
}

//! Tracing and metrics, set up once per process.

use std::collections::HashMap;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};

/// Keeps trace export running; [`Tracing::shutdown`] flushes what is still buffered.
pub struct Tracing(Option<SdkTracerProvider>);

impl Tracing {
    pub fn shutdown(self) {
        if let Some(provider) = self.0
            && let Err(err) = provider.shutdown()
        {
            eprintln!("cannot flush the last traces: {err}");
        }
    }
}

/// Installs the global tracing subscriber: logs to stderr, and spans over OTLP/HTTP when
/// an endpoint is configured.
pub fn init_tracing(config: &LogConfig) -> Tracing {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|err| {
        eprintln!(
            "invalid MODELPLANE_LOG `{}` ({err}); using `info`",
            config.log
        );
        EnvFilter::new("info")
    });
    let provider = config.otlp_endpoint.as_deref().and_then(|endpoint| {
        crate::install_crypto_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()
            .inspect_err(|err| eprintln!("cannot export traces to {endpoint}: {err}"))
            .ok()?;
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name("modelplane")
                        .build(),
                )
                .build(),
        )
    });
    let otel = provider
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("modelplane")));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => registry.with(stderr).init(),
        LogFormat::Json => registry
            .with(stderr.json().flatten_event(true).with_current_span(true))
            .init(),
    }
    Tracing(provider)
}

/// The current span's trace context as a W3C `traceparent`, to carry it through the work
/// queue; `None` when traces are not exported (or no span is sampled).
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` a child of the trace in `traceparent` (from [`current_traceparent`]).
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(context);
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

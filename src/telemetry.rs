//! Tracing and the metrics recorder, set up once per process (metric names: [`crate::metrics`]).

use std::collections::HashMap;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
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

/// Installs the global Prometheus recorder, describes every metric of [`crate::metrics`],
/// and returns the handle `/metrics` renders.
pub fn init_metrics() -> PrometheusHandle {
    let handle = PrometheusBuilder::new()
        .set_buckets(crate::metrics::DURATION_BUCKETS)
        .expect("the buckets are not empty")
        .set_buckets_for_metric(
            Matcher::Full(crate::metrics::DB_LOOKUPS_PER_STATEMENT.to_owned()),
            crate::metrics::BATCH_SIZE_BUCKETS,
        )
        .expect("the buckets are not empty")
        .set_buckets_for_metric(
            Matcher::Full(crate::metrics::DB_CREATES_PER_STATEMENT.to_owned()),
            crate::metrics::BATCH_SIZE_BUCKETS,
        )
        .expect("the buckets are not empty")
        .set_buckets_for_metric(
            Matcher::Full(crate::metrics::KEY_CHECK_SECONDS.to_owned()),
            crate::metrics::KEY_CHECK_BUCKETS,
        )
        .expect("the buckets are not empty")
        .install_recorder()
        .expect("the metrics recorder is installed once per process");
    crate::metrics::describe();
    handle
}

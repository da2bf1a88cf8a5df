//! Serving metrics: what each deployment's model servers report about themselves, read
//! every interval by the worker and written to Postgres (`status.load`, the series).
//!
//! - `engines.rs`: which metric names each engine publishes (vLLM's are the reference).
//! - `parse.rs`: a pod's Prometheus text page → its gauges, counters and histograms.
//! - `rates.rs`: rates and latency quantiles from successive readings, across restarts.
//! - `scrape.rs`: reading a pod's page, by pod IP or through the API server's pods/proxy.
//! - `prometheus.rs`: the same figures from a Prometheus, over PromQL.
//! - `collector.rs`: the loop that reads every deployment and writes one round.

mod collector;
mod engines;
mod parse;
mod prometheus;
mod rates;
mod scrape;

pub use collector::{Collector, LoadSettings, Source};
pub use engines::{Counter, MetricNames, dialect_of, names_of};
pub use parse::{Histogram, ParseError, PodMetrics, read};
pub use prometheus::{PromError, PromLoads, PromSource, TrackedFigures};
pub use rates::{PodDelta, Tracker, bucket_quantile, figures};
pub use scrape::{Answer, PodCall, ScrapeError, Via, call, metrics_port, scrape};

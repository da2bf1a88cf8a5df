//! The GraphQL view of serving metrics: `Deployment.load`, `Deployment.metrics`,
//! `Project.metrics` and the `deploymentLoad` subscription's messages.

use async_graphql::{Enum, SimpleObject};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain;
use crate::service::load::MetricsQuery;

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::MetricsDialect")]
pub enum MetricsDialect {
    Vllm,
    Sglang,
    Tgi,
    Unknown,
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::Track")]
pub enum Track {
    Stable,
    Canary,
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::SeriesName")]
pub enum SeriesName {
    RequestsPerSecond,
    PromptTokensPerSecond,
    GenerationTokensPerSecond,
    TtftP50Seconds,
    TtftP95Seconds,
    InterTokenLatencyP50Seconds,
    E2eLatencyP95Seconds,
    Waiting,
    Running,
    KvCacheUsage,
    ErrorRate,
    Replicas,
}

/// What a deployment (or its canary track) serves now, from its model servers' own
/// metrics. A null figure was not measured (not zero).
#[derive(SimpleObject)]
pub struct Load {
    pub as_of: DateTime<Utc>,
    /// The figures are not current; `reason` says why.
    pub stale: bool,
    pub reason: Option<String>,
    pub dialect: MetricsDialect,
    /// Ready pods at the reading, and those whose metrics were read.
    pub pods: i64,
    pub pods_read: i64,
    pub requests_per_second: Option<f64>,
    pub prompt_tokens_per_second: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub ttft_p50_seconds: Option<f64>,
    pub ttft_p95_seconds: Option<f64>,
    pub inter_token_latency_p50_seconds: Option<f64>,
    pub e2e_latency_p95_seconds: Option<f64>,
    pub waiting: Option<f64>,
    pub running: Option<f64>,
    /// 0 to 1, the mean over the pods.
    pub kv_cache_usage: Option<f64>,
    /// The fraction of finished requests that failed or were aborted.
    pub error_rate: Option<f64>,
}

impl From<&domain::Load> for Load {
    fn from(l: &domain::Load) -> Self {
        let f = &l.figures;
        Self {
            as_of: l.as_of,
            stale: l.stale,
            reason: l.reason.clone(),
            dialect: l.dialect.into(),
            pods: l.pods,
            pods_read: l.pods_read,
            requests_per_second: f.requests_per_second,
            prompt_tokens_per_second: f.prompt_tokens_per_second,
            generation_tokens_per_second: f.generation_tokens_per_second,
            ttft_p50_seconds: f.ttft_p50_seconds,
            ttft_p95_seconds: f.ttft_p95_seconds,
            inter_token_latency_p50_seconds: f.inter_token_latency_p50_seconds,
            e2e_latency_p95_seconds: f.e2e_latency_p95_seconds,
            waiting: f.waiting,
            running: f.running,
            kv_cache_usage: f.kv_cache_usage,
            error_rate: f.error_rate,
        }
    }
}

/// One series: a value (null: nothing measured) per timestamp of its `Metrics`.
#[derive(SimpleObject)]
pub struct Series {
    pub name: SeriesName,
    pub unit: String,
    pub values: Vec<Option<f64>>,
}

/// Serving metrics over a window, column-oriented (as REST's `…/metrics`).
#[derive(SimpleObject)]
pub struct Metrics {
    pub window_seconds: i64,
    pub step_seconds: i64,
    /// The stored resolution read: 15 s readings up to 24 h, 5-minute rollups beyond.
    pub resolution_seconds: i64,
    pub timestamps: Vec<DateTime<Utc>>,
    pub series: Vec<Series>,
}

impl From<domain::Metrics> for Metrics {
    fn from(m: domain::Metrics) -> Self {
        Self {
            window_seconds: m.window_seconds,
            step_seconds: m.step_seconds,
            resolution_seconds: m.resolution_seconds,
            timestamps: m.timestamps,
            series: m
                .series
                .into_iter()
                .map(|s| Series {
                    name: s.name.into(),
                    unit: s.unit,
                    values: s.values,
                })
                .collect(),
        }
    }
}

/// A new reading of a deployment's load.
#[derive(SimpleObject)]
pub struct LoadChange {
    /// The change's number in the feed.
    pub seq: i64,
    pub id: Uuid,
    pub name: String,
    pub load: Option<Load>,
    pub canary_load: Option<Load>,
}

impl LoadChange {
    pub fn of(seq: i64, update: &domain::LoadUpdate) -> Self {
        Self {
            seq,
            id: update.id,
            name: update.name.clone(),
            load: update.load.as_ref().map(Into::into),
            canary_load: update.canary_load.as_ref().map(Into::into),
        }
    }
}

/// A metrics query from GraphQL arguments (the same rules and errors as REST's).
pub fn query(
    window: Option<String>,
    step: Option<String>,
    series: Option<Vec<SeriesName>>,
    track: Option<Track>,
) -> MetricsQuery {
    MetricsQuery {
        window,
        step,
        series: series.map(|names| {
            names
                .into_iter()
                .map(|n| domain::SeriesName::from(n).as_str())
                .collect::<Vec<_>>()
                .join(",")
        }),
        track: track.map(|t| domain::Track::from(t).as_str().to_owned()),
    }
}

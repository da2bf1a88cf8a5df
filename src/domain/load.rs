//! What a deployment serves: the load its model servers report about themselves, now
//! (`status.load`) and over time (the metric series).
//!
//! Every number is optional: `None` means "not measured" (the engine does not publish it,
//! no request finished in the interval so there is no latency, or only one reading of a
//! counter exists so there is no rate yet), never zero in disguise.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Which pods of a deployment a load describes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Track {
    Stable,
    Canary,
}

impl Track {
    pub const ALL: [Track; 2] = [Track::Stable, Track::Canary];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stable => "stable",
            Self::Canary => "canary",
        }
    }
}

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Track {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a track; use stable or canary"))
    }
}

/// Whose metric names a model server publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum MetricsDialect {
    /// vLLM's `vllm:` series (also served by the `sim` engine and llm-d-inference-sim).
    Vllm,
    /// SGLang's `sglang:` series.
    Sglang,
    /// Text Generation Inference's `tgi_` series.
    Tgi,
    /// An engine whose metrics modelplane does not know: nothing is read from it.
    Unknown,
}

impl MetricsDialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Tgi => "tgi",
            Self::Unknown => "unknown",
        }
    }
}

/// The numbers of one reading, for a track or a whole deployment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadFigures {
    /// Requests finished per second (any outcome).
    pub requests_per_second: Option<f64>,
    /// Prompt (input) tokens processed per second.
    pub prompt_tokens_per_second: Option<f64>,
    /// Generated (output) tokens per second.
    pub generation_tokens_per_second: Option<f64>,
    /// Time to first token over the interval: median and 95th percentile, in seconds.
    pub ttft_p50_seconds: Option<f64>,
    pub ttft_p95_seconds: Option<f64>,
    /// Time between output tokens, median, in seconds.
    pub inter_token_latency_p50_seconds: Option<f64>,
    /// Whole-request latency, 95th percentile, in seconds.
    pub e2e_latency_p95_seconds: Option<f64>,
    /// Requests queued (waiting for a slot), summed over the pods.
    pub waiting: Option<f64>,
    /// Requests being served, summed over the pods.
    pub running: Option<f64>,
    /// KV-cache use, 0 to 1, the mean over the pods.
    pub kv_cache_usage: Option<f64>,
    /// The fraction of finished requests that ended in an error or were aborted.
    pub error_rate: Option<f64>,
}

/// What a deployment (or one of its tracks) serves now: `status.load`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    /// When the pods were read.
    pub as_of: DateTime<Utc>,
    /// The numbers are not current: the last reading failed (see `reason`); the figures are
    /// the last good ones, or absent.
    pub stale: bool,
    /// Why the load is stale or missing, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub dialect: MetricsDialect,
    /// Ready pods at the reading.
    pub pods: i64,
    /// Pods whose metrics were read at the reading.
    pub pods_read: i64,
    #[serde(flatten)]
    pub figures: LoadFigures,
}

/// One stored reading of a track: the figures and the ready replicas, at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSample {
    pub at: DateTime<Utc>,
    pub replicas: i64,
    pub figures: LoadFigures,
}

/// A series that `…/metrics` can return, named as the query parameter `series` spells it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    ToSchema,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
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

impl SeriesName {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The unit, as UCUM-like text a chart can print.
    pub fn unit(self) -> &'static str {
        match self {
            Self::RequestsPerSecond => "requests/s",
            Self::PromptTokensPerSecond | Self::GenerationTokensPerSecond => "tokens/s",
            Self::TtftP50Seconds
            | Self::TtftP95Seconds
            | Self::InterTokenLatencyP50Seconds
            | Self::E2eLatencyP95Seconds => "s",
            Self::Waiting | Self::Running => "requests",
            Self::KvCacheUsage | Self::ErrorRate => "ratio",
            Self::Replicas => "replicas",
        }
    }
}

/// One series of a metrics answer: a value (or a gap) per timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    pub name: SeriesName,
    pub unit: String,
    /// One per timestamp; `null` where nothing was measured.
    pub values: Vec<Option<f64>>,
}

/// A deployment's (or a project's) metrics over a window, column-oriented: the values of
/// every series line up with `timestamps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    pub window_seconds: i64,
    pub step_seconds: i64,
    /// The stored resolution the points were computed from: 15 s readings for windows
    /// within their retention, 5-minute rollups beyond.
    pub resolution_seconds: i64,
    /// The start of each step.
    pub timestamps: Vec<DateTime<Utc>>,
    pub series: Vec<Series>,
}

/// A new reading of one deployment's load, as the change feed sends it to watchers that
/// asked for load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadUpdate {
    pub id: uuid::Uuid,
    pub name: String,
    /// The whole deployment (`status.load`).
    pub load: Option<Load>,
    /// The canary track alone (`status.canary.load`), while there is one.
    pub canary_load: Option<Load>,
}

impl LoadUpdate {
    pub fn of(deployment: &super::Deployment) -> Self {
        Self {
            id: deployment.id,
            name: deployment.name.clone(),
            load: deployment.status.load.clone(),
            canary_load: deployment
                .status
                .canary
                .as_ref()
                .and_then(|c| c.load.clone()),
        }
    }
}

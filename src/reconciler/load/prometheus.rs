//! The serving load of every deployment read from a Prometheus server
//! (`MODELPLANE_PROMETHEUS_URL`) instead of from the model server pods: a few PromQL
//! instant queries over all deployments at once, one per figure and grouping, run
//! concurrently and each time-boxed, all evaluated at the same instant.
//!
//! Prometheus must scrape the model server pods with two of their labels on every series,
//! named as Prometheus sanitises them (`labelmap` of the `kubernetes_sd_configs` pod
//! labels, or a PodMonitor's `podTargetLabels`): `modelplane.io/deployment-id` as
//! `modelplane_io_deployment_id` and `modelplane.io/track` as `modelplane_io_track`. A
//! series without a track label belongs to the stable track (modelplane labels only its
//! canary pods), and `instance` must tell the pods apart (it does by default: the pod's
//! address). Series whose deployment label is not a UUID, or whose track is neither
//! `stable` nor `canary`, are left out (the latter only from the per-track figures).
//!
//! Only the vLLM dialect is mapped (vLLM, modelplane's `sim` engine and
//! llm-d-inference-sim publish it), with vLLM's older names as fallbacks
//! (`vllm:gpu_cache_usage_perc`, `vllm:time_per_output_token_seconds`). SGLang's and
//! TGI's series have other names and shapes (see `engines`) and would need their own
//! queries: deployments of those engines get no figures through Prometheus.
//!
//! A figure is `None` when Prometheus has no series for it, or when its value is not a
//! number: a quantile or an error rate over an interval in which nothing finished (0/0 is
//! NaN in PromQL). The answers are decoded as prometheus/prometheus
//! docs/querying/api.md documents them ("Format overview", "Instant queries", "Instant
//! vectors"): an envelope `{"status": "success" | "error", "data", "errorType", "error"}`,
//! and for an instant query `data.resultType` `vector` with `result` a list of
//! `{"metric": {labels}, "value": [unix seconds, "value as text"]}`, where the value may be
//! `NaN`, `+Inf` or `-Inf`; errors come with 400, 422 or 503 and the same envelope.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use uuid::Uuid;

use crate::domain::{LoadFigures, Track};

/// The label carrying a series' `modelplane.io/deployment-id` pod label.
pub const DEPLOYMENT_LABEL: &str = "modelplane_io_deployment_id";
/// The label carrying a series' `modelplane.io/track` pod label.
pub const TRACK_LABEL: &str = "modelplane_io_track";

/// The most bytes read of one answer: each holds one sample per deployment (and track),
/// so this is far above any real answer.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// What Prometheus says every deployment it has series of serves now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromLoads {
    pub deployments: HashMap<Uuid, TrackedFigures>,
}

/// One deployment's figures: over all its pods, and per track.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrackedFigures {
    pub all: LoadFigures,
    /// The tracks Prometheus has series of.
    pub tracks: BTreeMap<Track, LoadFigures>,
    /// Pods Prometheus has a `vllm:num_requests_running` series of (distinct `instance`s):
    /// the pods it scrapes.
    pub pods: i64,
    /// The same per track.
    pub track_pods: BTreeMap<Track, i64>,
}

/// Why Prometheus could not be read. Each is one line naming the URL asked, never its
/// credentials.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromError {
    #[error("MODELPLANE_PROMETHEUS_URL is not a usable Prometheus URL: {0}")]
    BadUrl(String),
    #[error("Prometheus at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("Prometheus at {url} did not answer within {} ms", .timeout.as_millis())]
    TimedOut { url: String, timeout: Duration },
    #[error("Prometheus at {url} answered HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        /// The answer's first line, cut short.
        body: String,
    },
    #[error("Prometheus at {url} failed the query `{query}`: {error_type}: {error}")]
    Query {
        url: String,
        query: String,
        error_type: String,
        error: String,
    },
    #[error("Prometheus at {url} sent an answer that cannot be read: {reason}")]
    Undecodable { url: String, reason: String },
}

/// A Prometheus server to read the load from.
#[derive(Clone)]
pub struct PromSource {
    /// The server's URL, ending in `/`; its user info (if any) becomes basic auth.
    base: Url,
    client: reqwest::Client,
    timeout: Duration,
}

impl fmt::Debug for PromSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromSource")
            .field("url", &shown(&self.base))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PromSource {
    /// A source for the server at `url` (`MODELPLANE_PROMETHEUS_URL`: http or https, with
    /// a path prefix if the server has one, and `user:password@` for basic auth), whose
    /// every answer may take `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, PromError> {
        let mut base = Url::parse(url.trim()).map_err(|e| PromError::BadUrl(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(PromError::BadUrl(format!(
                "the scheme is {}, not http or https",
                base.scheme()
            )));
        }
        if base.host_str().is_none_or(str::is_empty) {
            return Err(PromError::BadUrl("it names no host".into()));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(PromError::BadUrl(
                "it has a query or a fragment; give the server's address only".into(),
            ));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| PromError::BadUrl(format!("cannot build its HTTP client: {e}")))?;
        Ok(Self {
            base,
            client,
            timeout,
        })
    }

    /// The server's URL without credentials.
    pub fn url(&self) -> String {
        shown(&self.base)
    }

    /// Whether the server is ready to answer queries (`/-/ready`, for `/readyz`).
    pub async fn ready(&self) -> Result<(), PromError> {
        let url = self.endpoint("-/ready");
        let (status, body) = self.get(url.clone()).await?;
        if status == 200 {
            return Ok(());
        }
        Err(PromError::Status {
            url: shown(&url),
            status,
            body: first_line(&body),
        })
    }

    /// Every deployment's figures over the last `rate_window` (the range of `rate()`: at
    /// least two scrape intervals, or the rates are missing).
    pub async fn read(&self, rate_window: Duration) -> Result<PromLoads, PromError> {
        let window = promql_duration(rate_window);
        // All queries at one instant, so the figures agree with each other.
        let now = chrono::Utc::now().timestamp_millis();
        let time = format!("{}.{:03}", now.div_euclid(1000), now.rem_euclid(1000));
        let queries = Figure::ALL.iter().flat_map(|&figure| {
            [Grouping::Deployment, Grouping::Track].map(|grouping| {
                let promql = figure.promql(grouping, &window);
                let time = &time;
                async move {
                    let samples = self.query(&promql, time).await?;
                    Ok::<_, PromError>((figure, grouping, samples))
                }
            })
        });
        let answers = futures::future::try_join_all(queries).await?;
        let mut loads = PromLoads::default();
        for (figure, grouping, samples) in answers {
            loads.add(figure, grouping, &samples);
        }
        Ok(loads)
    }

    /// One instant query; its samples.
    async fn query(&self, promql: &str, time: &str) -> Result<Vec<Sample>, PromError> {
        let mut url = self.endpoint("api/v1/query");
        url.query_pairs_mut()
            .append_pair("query", promql)
            .append_pair("time", time)
            .append_pair("timeout", &promql_duration(self.timeout));
        let (status, body) = self.get(url.clone()).await?;
        let mut at = url;
        at.set_query(None);
        decode(status, &body).map_err(|e| e.at(&shown(&at), promql))
    }

    fn endpoint(&self, path: &str) -> Url {
        self.base
            .join(path)
            .expect("a relative path joins onto an http URL")
    }

    /// GETs `url` within the timeout: the status and at most `MAX_ANSWER_BYTES` of body.
    async fn get(&self, url: Url) -> Result<(u16, Vec<u8>), PromError> {
        let mut at = url.clone();
        at.set_query(None);
        let failed = |err: reqwest::Error| {
            if err.is_timeout() {
                PromError::TimedOut {
                    url: shown(&at),
                    timeout: self.timeout,
                }
            } else {
                PromError::Unreachable {
                    url: shown(&at),
                    reason: cause(&err.without_url()),
                }
            }
        };
        // reqwest's timeout runs from connecting to the body's end.
        let mut response = self
            .client
            .get(url)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(PromError::Undecodable {
                    url: shown(&at),
                    reason: format!("the answer is over {MAX_ANSWER_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }
}

/// `url` without user info (and so without credentials).
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// The innermost cause of a transport error (e.g. "Connection refused (os error 111)"),
/// on one line.
fn cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = err;
    while let Some(source) = inner.source() {
        inner = source;
    }
    one_line(&inner.to_string())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first line of an answer's body, at most 200 characters.
fn first_line(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut line = one_line(line);
    if line.chars().count() > 200 {
        line = line.chars().take(200).collect::<String>() + "…";
    }
    if line.is_empty() {
        "(no body)".into()
    } else {
        line
    }
}

/// A duration as PromQL writes one: whole milliseconds (at least one).
fn promql_duration(d: Duration) -> String {
    let ms = d.as_millis().max(1);
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// How a query groups the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// Per deployment, all its pods together.
    Deployment,
    /// Per deployment and track.
    Track,
}

impl Grouping {
    fn by(self) -> String {
        match self {
            Self::Deployment => DEPLOYMENT_LABEL.to_string(),
            Self::Track => format!("{DEPLOYMENT_LABEL}, {TRACK_LABEL}"),
        }
    }

    /// The series of `expr` ready to be aggregated: per track, a series without a track
    /// label is given `stable`, so it adds up with any labelled `stable`.
    fn series(self, expr: &str) -> String {
        match self {
            Self::Deployment => expr.to_string(),
            Self::Track => {
                format!(r#"label_replace({expr}, "{TRACK_LABEL}", "stable", "{TRACK_LABEL}", "")"#)
            }
        }
    }
}

/// One figure of a deployment's load, and the PromQL that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Figure {
    RequestsPerSecond,
    PromptTokensPerSecond,
    GenerationTokensPerSecond,
    TtftP50,
    TtftP95,
    InterTokenLatencyP50,
    E2eLatencyP95,
    Waiting,
    Running,
    KvCacheUsage,
    ErrorRate,
    Pods,
}

impl Figure {
    const ALL: [Figure; 12] = [
        Self::RequestsPerSecond,
        Self::PromptTokensPerSecond,
        Self::GenerationTokensPerSecond,
        Self::TtftP50,
        Self::TtftP95,
        Self::InterTokenLatencyP50,
        Self::E2eLatencyP95,
        Self::Waiting,
        Self::Running,
        Self::KvCacheUsage,
        Self::ErrorRate,
        Self::Pods,
    ];

    /// The query for this figure, grouped as `g`, with `window` the range of its rates.
    fn promql(self, g: Grouping, window: &str) -> String {
        let by = g.by();
        let sum = |expr: &str| format!("sum by ({by}) ({})", g.series(expr));
        let sum_rate = |metric: &str| sum(&format!("rate({metric}[{window}])"));
        // `a or b` keeps b's series only where a has none with the same labels (the
        // metric name aside, which rate() drops): the newer name wins on a pod that
        // publishes both.
        let bucket_rates = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("rate({n}_bucket[{window}])"))
                .collect::<Vec<_>>()
                .join(" or ")
        };
        let quantile = |q: f64, names: &[&str]| {
            format!(
                "histogram_quantile({q}, sum by ({by}, le) ({}))",
                g.series(&bucket_rates(names))
            )
        };
        match self {
            Self::RequestsPerSecond => sum_rate("vllm:request_success_total"),
            Self::PromptTokensPerSecond => sum_rate("vllm:prompt_tokens_total"),
            Self::GenerationTokensPerSecond => sum_rate("vllm:generation_tokens_total"),
            Self::TtftP50 => quantile(0.5, &["vllm:time_to_first_token_seconds"]),
            Self::TtftP95 => quantile(0.95, &["vllm:time_to_first_token_seconds"]),
            Self::InterTokenLatencyP50 => quantile(
                0.5,
                &[
                    "vllm:inter_token_latency_seconds",
                    "vllm:time_per_output_token_seconds",
                ],
            ),
            Self::E2eLatencyP95 => quantile(0.95, &["vllm:e2e_request_latency_seconds"]),
            Self::Waiting => sum("vllm:num_requests_waiting"),
            Self::Running => sum("vllm:num_requests_running"),
            // The same `or` as for the histograms; the series keep their names here, but
            // `or` matches label sets without the metric name.
            Self::KvCacheUsage => format!(
                "avg by ({by}) ({})",
                g.series("vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc")
            ),
            // Failed (aborted, or an internal error in later vLLM releases) over all
            // finished; 0 rather than nothing where requests finished and no failure
            // series exists, NaN (so None) where nothing finished.
            Self::ErrorRate => {
                let failed =
                    sum_rate(r#"vllm:request_success_total{finished_reason=~"abort|error"}"#);
                let all = sum_rate("vllm:request_success_total");
                format!("({failed} or 0 * {all}) / {all}")
            }
            // Distinct scraped pods, whatever number of series (engine cores) each has.
            Self::Pods => format!(
                "count by ({by}) (count by ({by}, instance) ({}))",
                g.series("vllm:num_requests_running")
            ),
        }
    }

    fn set(self, figures: &mut LoadFigures, value: Option<f64>) {
        let field = match self {
            Self::RequestsPerSecond => &mut figures.requests_per_second,
            Self::PromptTokensPerSecond => &mut figures.prompt_tokens_per_second,
            Self::GenerationTokensPerSecond => &mut figures.generation_tokens_per_second,
            Self::TtftP50 => &mut figures.ttft_p50_seconds,
            Self::TtftP95 => &mut figures.ttft_p95_seconds,
            Self::InterTokenLatencyP50 => &mut figures.inter_token_latency_p50_seconds,
            Self::E2eLatencyP95 => &mut figures.e2e_latency_p95_seconds,
            Self::Waiting => &mut figures.waiting,
            Self::Running => &mut figures.running,
            Self::KvCacheUsage => &mut figures.kv_cache_usage,
            Self::ErrorRate => &mut figures.error_rate,
            Self::Pods => return,
        };
        *field = value;
    }
}

impl PromLoads {
    /// Takes in the answer to `figure`'s query grouped as `grouping`.
    fn add(&mut self, figure: Figure, grouping: Grouping, samples: &[Sample]) {
        for sample in samples {
            let Some(id) = sample
                .metric
                .get(DEPLOYMENT_LABEL)
                .and_then(|v| Uuid::parse_str(v).ok())
            else {
                continue;
            };
            let track = match grouping {
                Grouping::Deployment => None,
                Grouping::Track => {
                    let label = sample.metric.get(TRACK_LABEL).map_or("", String::as_str);
                    let label = if label.is_empty() { "stable" } else { label };
                    match label.parse::<Track>() {
                        Ok(track) => Some(track),
                        Err(_) => continue,
                    }
                }
            };
            let deployment = self.deployments.entry(id).or_default();
            if figure == Figure::Pods {
                let pods = sample.value.map_or(0, |v| v.round() as i64);
                match track {
                    None => deployment.pods = pods,
                    Some(track) => {
                        deployment.track_pods.insert(track, pods);
                    }
                }
                continue;
            }
            let figures = match track {
                None => &mut deployment.all,
                Some(track) => deployment.tracks.entry(track).or_default(),
            };
            figure.set(figures, sample.value);
        }
    }
}

/// One sample of an instant vector: its labels and its value (`None` when not a finite
/// number).
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    metric: HashMap<String, String>,
    value: Option<f64>,
}

/// Why an answer was refused, before the URL and query are known.
#[derive(Debug, PartialEq)]
enum Refusal {
    Status { status: u16, body: String },
    Query { error_type: String, error: String },
    Undecodable(String),
}

impl Refusal {
    fn at(self, url: &str, query: &str) -> PromError {
        let url = url.to_string();
        match self {
            Self::Status { status, body } => PromError::Status { url, status, body },
            Self::Query { error_type, error } => PromError::Query {
                url,
                query: query.to_string(),
                error_type,
                error,
            },
            Self::Undecodable(reason) => PromError::Undecodable { url, reason },
        }
    }
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSample {
    metric: HashMap<String, String>,
    /// `[unix seconds, "value"]`; absent for a native histogram sample, which none of
    /// these queries gives.
    #[serde(default)]
    value: Option<(f64, String)>,
}

/// An instant query's answer (HTTP status and body) as its samples.
fn decode(status: u16, body: &[u8]) -> Result<Vec<Sample>, Refusal> {
    let ok = (200..300).contains(&status);
    let data = match serde_json::from_slice::<Envelope>(body) {
        // Prometheus' own error, with any status (400, 422, 503 documented).
        Ok(envelope) if envelope.status == "error" => {
            return Err(Refusal::Query {
                error_type: one_line(envelope.error_type.as_deref().unwrap_or("unknown")),
                error: one_line(envelope.error.as_deref().unwrap_or("(no error text)")),
            });
        }
        Ok(envelope) if ok && envelope.status == "success" => envelope
            .data
            .ok_or_else(|| Refusal::Undecodable("a successful answer without data".into()))?,
        // Something else answered: a proxy, or not a Prometheus.
        _ if !ok => {
            return Err(Refusal::Status {
                status,
                body: first_line(body),
            });
        }
        Ok(envelope) => {
            return Err(Refusal::Undecodable(format!(
                "the status is {:?}, neither success nor error",
                one_line(&envelope.status)
            )));
        }
        Err(e) => return Err(Refusal::Undecodable(one_line(&e.to_string()))),
    };
    if data.result_type != "vector" {
        return Err(Refusal::Undecodable(format!(
            "the result is a {}, not an instant vector",
            data.result_type
        )));
    }
    let raw: Vec<RawSample> = serde_json::from_value(data.result)
        .map_err(|e| Refusal::Undecodable(one_line(&e.to_string())))?;
    raw.into_iter()
        .filter_map(|s| Some((s.metric, s.value?.1)))
        .map(|(metric, text)| {
            Ok(Sample {
                metric,
                value: sample_value(&text)?,
            })
        })
        .collect()
}

/// A sample value as Prometheus writes it (Go's float formatting, or `NaN`, `+Inf`,
/// `-Inf`): `None` unless a finite number.
fn sample_value(text: &str) -> Result<Option<f64>, Refusal> {
    let value: f64 = text
        .parse()
        .map_err(|_| Refusal::Undecodable(format!("the sample value {text:?} is not a number")))?;
    Ok(value.is_finite().then_some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT: &str = "0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11";

    fn uuid() -> Uuid {
        Uuid::parse_str(DEPLOYMENT).unwrap()
    }

    // Captured from Prometheus 2.42 (`GET /api/v1/query`) scraping the two sim pods of one
    // deployment, a stable one (no track label) and a canary: generated tokens per second
    // by deployment and track (`Figure::GenerationTokensPerSecond`)...
    const TRACK_ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"modelplane_io_deployment_id":"0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11","modelplane_io_track":"canary"},"value":[1795787008.864,"10.448275862068966"]},{"metric":{"modelplane_io_deployment_id":"0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11","modelplane_io_track":"stable"},"value":[1795787008.864,"10.448275862068966"]}]}}"#;
    // ... the pods by deployment and track (`Figure::Pods`) ...
    const PODS_ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"modelplane_io_deployment_id":"0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11","modelplane_io_track":"canary"},"value":[1795787008.864,"1"]},{"metric":{"modelplane_io_deployment_id":"0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11","modelplane_io_track":"stable"},"value":[1795787008.864,"1"]}]}}"#;
    // ... the error rate by deployment over an idle window (0/0) ...
    const NAN_ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"modelplane_io_deployment_id":"0b9f3f2e-4d1c-4a53-9a43-0a2b5e7c9d11"},"value":[1795787008.864,"NaN"]}]}}"#;
    // ... and HTTP 400 for a query that does not parse.
    const ERROR_ANSWER: &str = r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:5: parse error: unclosed left parenthesis"}"#;

    #[test]
    fn an_instant_vector_decodes_with_its_labels_and_values() {
        let samples = decode(200, TRACK_ANSWER.as_bytes()).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].metric[DEPLOYMENT_LABEL], DEPLOYMENT);
        assert_eq!(samples[0].metric[TRACK_LABEL], "canary");
        assert_eq!(samples[0].value, Some(10.448275862068966));
        assert_eq!(samples[1].metric[TRACK_LABEL], "stable");
    }

    #[test]
    fn not_a_number_is_not_measured() {
        let samples = decode(200, NAN_ANSWER.as_bytes()).unwrap();
        assert_eq!(samples[0].value, None);
        for text in ["NaN", "+Inf", "-Inf"] {
            assert_eq!(sample_value(text), Ok(None), "{text}");
        }
        assert_eq!(sample_value("0.25"), Ok(Some(0.25)));
        assert_eq!(sample_value("1e-05"), Ok(Some(1e-5)));
        assert!(matches!(sample_value("x"), Err(Refusal::Undecodable(_))));
    }

    #[test]
    fn an_error_answer_is_the_query_error_it_carries() {
        let err = decode(400, ERROR_ANSWER.as_bytes())
            .unwrap_err()
            .at("http://prom:9090/api/v1/query", "foo(");
        assert_eq!(
            err.to_string(),
            r#"Prometheus at http://prom:9090/api/v1/query failed the query `foo(`: bad_data: invalid parameter "query": 1:5: parse error: unclosed left parenthesis"#
        );
    }

    #[test]
    fn other_answers_are_refused_on_one_line() {
        let proxy = decode(502, b"<html>\n<h1>502 Bad Gateway</h1></html>").unwrap_err();
        assert_eq!(
            proxy,
            Refusal::Status {
                status: 502,
                body: "<html>".into()
            }
        );
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(
            decode(200, matrix.as_bytes()).unwrap_err(),
            Refusal::Undecodable("the result is a matrix, not an instant vector".into())
        );
        assert!(matches!(
            decode(200, b"not json").unwrap_err(),
            Refusal::Undecodable(_)
        ));
        // A Kubernetes API server's Status (its `status` is not Prometheus').
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
        assert!(matches!(
            decode(404, status.as_bytes()).unwrap_err(),
            Refusal::Status { status: 404, .. }
        ));
    }

    #[test]
    fn samples_land_on_their_deployment_and_track() {
        let mut loads = PromLoads::default();
        let answer = |text: &str| decode(200, text.as_bytes()).unwrap();
        loads.add(
            Figure::GenerationTokensPerSecond,
            Grouping::Track,
            &answer(TRACK_ANSWER),
        );
        loads.add(Figure::Pods, Grouping::Track, &answer(PODS_ANSWER));
        let all = |value| {
            vec![Sample {
                metric: HashMap::from([(DEPLOYMENT_LABEL.to_string(), DEPLOYMENT.to_string())]),
                value: Some(value),
            }]
        };
        loads.add(
            Figure::GenerationTokensPerSecond,
            Grouping::Deployment,
            &all(20.9),
        );
        loads.add(Figure::Pods, Grouping::Deployment, &all(2.0));
        loads.add(
            Figure::ErrorRate,
            Grouping::Deployment,
            &decode(200, NAN_ANSWER.as_bytes()).unwrap(),
        );
        let d = &loads.deployments[&uuid()];
        assert_eq!(d.all.generation_tokens_per_second, Some(20.9));
        assert_eq!(d.all.error_rate, None);
        assert_eq!(d.pods, 2);
        for track in Track::ALL {
            let figures = &d.tracks[&track];
            assert_eq!(
                figures.generation_tokens_per_second,
                Some(10.448275862068966)
            );
            assert_eq!(figures.running, None, "never read");
        }
        assert_eq!(
            d.track_pods,
            BTreeMap::from([(Track::Stable, 1), (Track::Canary, 1)])
        );
    }

    #[test]
    fn a_missing_track_is_stable_and_foreign_labels_are_left_out() {
        let sample = |labels: &[(&str, &str)]| Sample {
            metric: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: Some(1.0),
        };
        let mut loads = PromLoads::default();
        loads.add(
            Figure::Waiting,
            Grouping::Track,
            &[
                sample(&[(DEPLOYMENT_LABEL, DEPLOYMENT)]),
                sample(&[(DEPLOYMENT_LABEL, DEPLOYMENT), (TRACK_LABEL, "blue")]),
                sample(&[(DEPLOYMENT_LABEL, "not-a-uuid")]),
                sample(&[("job", "other")]),
            ],
        );
        assert_eq!(loads.deployments.len(), 1);
        let d = &loads.deployments[&uuid()];
        assert_eq!(d.tracks.len(), 1);
        assert_eq!(d.tracks[&Track::Stable].waiting, Some(1.0));
    }

    #[test]
    fn queries_group_all_deployments_and_fall_back_to_older_names() {
        assert_eq!(
            Figure::RequestsPerSecond.promql(Grouping::Deployment, "30s"),
            "sum by (modelplane_io_deployment_id) (rate(vllm:request_success_total[30s]))"
        );
        assert_eq!(
            Figure::Running.promql(Grouping::Track, "30s"),
            r#"sum by (modelplane_io_deployment_id, modelplane_io_track) (label_replace(vllm:num_requests_running, "modelplane_io_track", "stable", "modelplane_io_track", ""))"#
        );
        assert_eq!(
            Figure::InterTokenLatencyP50.promql(Grouping::Deployment, "1m"),
            "histogram_quantile(0.5, sum by (modelplane_io_deployment_id, le) (rate(vllm:inter_token_latency_seconds_bucket[1m]) or rate(vllm:time_per_output_token_seconds_bucket[1m])))"
        );
        assert_eq!(
            Figure::ErrorRate.promql(Grouping::Deployment, "1m"),
            r#"(sum by (modelplane_io_deployment_id) (rate(vllm:request_success_total{finished_reason=~"abort|error"}[1m])) or 0 * sum by (modelplane_io_deployment_id) (rate(vllm:request_success_total[1m]))) / sum by (modelplane_io_deployment_id) (rate(vllm:request_success_total[1m]))"#
        );
        assert!(
            Figure::KvCacheUsage
                .promql(Grouping::Deployment, "1m")
                .contains("vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc")
        );
    }

    #[test]
    fn durations_are_whole_seconds_or_milliseconds() {
        assert_eq!(promql_duration(Duration::from_secs(60)), "60s");
        assert_eq!(promql_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(promql_duration(Duration::ZERO), "1ms");
    }

    #[test]
    fn the_url_is_checked_and_shown_without_credentials() {
        let source = PromSource::new(
            "https://admin:s3cret@prom.example:9090/prom",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(source.url(), "https://prom.example:9090/prom/");
        assert!(!format!("{source:?}").contains("s3cret"));
        assert_eq!(
            shown(&source.endpoint("api/v1/query")),
            "https://prom.example:9090/prom/api/v1/query"
        );
        for bad in ["prom:9090", "ftp://prom", "http://prom/?x=1", "not a url"] {
            let err = PromSource::new(bad, Duration::from_secs(5)).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("MODELPLANE_PROMETHEUS_URL is not"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn answers_are_cut_to_their_first_line() {
        assert_eq!(
            first_line(b"\n  Service Unavailable\nmore"),
            "Service Unavailable"
        );
        assert_eq!(first_line(b""), "(no body)");
        assert_eq!(first_line("x".repeat(300).as_bytes()).chars().count(), 201);
    }
}

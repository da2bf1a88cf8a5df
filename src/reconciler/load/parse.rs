//! Reading one pod's `/metrics` page (the Prometheus text format, parsed by
//! `prom_text_format_parser`) into the figures of its dialect (see `engines`).

use std::collections::HashMap;

use prom_text_format_parser::{Labels, Metric, ScrapeParseError, Type, ValueType, parse_scrape};

use super::engines::{Counter, MetricNames, names_of};
use crate::domain::MetricsDialect;

/// A histogram read from a page: cumulative buckets, summed over label sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(le, cumulative count)`, sorted by `le`, one entry per `le`; `+Inf` included.
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

impl Histogram {
    /// Adds another histogram into this one, bucket by equal `le`.
    pub fn add(&mut self, other: &Histogram) {
        self.buckets.extend_from_slice(&other.buckets);
        self.buckets = coalesce(std::mem::take(&mut self.buckets));
        self.count += other.count;
        self.sum += other.sum;
    }
}

/// Sorts buckets by `le` and adds up those with the same `le`.
fn coalesce(mut buckets: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for (le, count) in buckets {
        match out.last_mut() {
            Some(last) if last.0 == le => last.1 += count,
            _ => out.push((le, count)),
        }
    }
    out
}

/// What one pod's page says. `None`: the page does not carry it (or the engine never
/// publishes it). Counters are totals since the server started, summed over label sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodMetrics {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub finished: Option<f64>,
    pub failed: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub ttft: Option<Histogram>,
    pub inter_token: Option<Histogram>,
    pub e2e: Option<Histogram>,
}

impl PodMetrics {
    /// The page carried none of the dialect's metrics.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A page that could not be read, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

/// Reads a `/metrics` page by the names of `dialect`. A page without any of them is `Ok` with
/// every figure `None`; so is an empty page, and any page of the `Unknown` dialect.
pub fn read(dialect: MetricsDialect, text: &str) -> Result<PodMetrics, ParseError> {
    if dialect == MetricsDialect::Unknown || text.trim().is_empty() {
        // The parser rejects an empty input; an empty page simply says nothing.
        return Ok(PodMetrics::default());
    }
    let (metrics, error) = parse_scrape(text);
    match error {
        Some(ScrapeParseError::Parse(message)) => return Err(syntax_error(&message)),
        // The parser reports HELP/TYPE lines without samples (what prometheus_client
        // prints for a labelled metric nothing has touched yet) as errors; Prometheus
        // accepts them, and every sample is still returned.
        Some(ScrapeParseError::Collect(_)) | None => {}
    }
    let page = Page::new(&metrics);
    from_page(names_of(dialect), &page)
}

fn from_page(names: &MetricNames, page: &Page) -> Result<PodMetrics, ParseError> {
    let finished = page.counter(names.finished)?;
    let mut failed = page.counter(names.failed)?;
    // Engines create a request counter on its first use (prometheus_client's labelled
    // children, the metrics crate in TGI): when requests are counted but no failure ever
    // was, the failures are zero, not unknown.
    if failed.is_none() && finished.is_some() && !names.failed.is_empty() {
        failed = Some(0.0);
    }
    Ok(PodMetrics {
        running: page.gauge(names.running, Combine::Sum)?,
        waiting: page.gauge(names.waiting, Combine::Sum)?,
        // One label set per engine core: their usage is averaged, not added.
        kv_cache_usage: page.gauge(names.kv_cache_usage, Combine::Mean)?,
        finished,
        failed,
        prompt_tokens: page.counter(names.prompt_tokens)?,
        generation_tokens: page.counter(names.generation_tokens)?,
        ttft: page.histogram(names.ttft)?,
        inter_token: page.histogram(names.inter_token)?,
        e2e: page.histogram(names.e2e)?,
    })
}

#[derive(Clone, Copy)]
enum Combine {
    Sum,
    Mean,
}

/// The samples of a page by their full series name (`x_bucket`, `x_sum`, `x_count` for a
/// histogram `x`), so typed and untyped pages read alike.
struct Page<'a> {
    series: HashMap<String, Vec<(&'a Labels, &'a str)>>,
}

impl<'a> Page<'a> {
    fn new(metrics: &'a [Metric]) -> Self {
        let mut series: HashMap<String, Vec<(&Labels, &str)>> = HashMap::new();
        for metric in metrics {
            for sample in &metric.samples {
                let suffix = match (metric.kind, sample.value.value_type) {
                    (Type::Histogram, ValueType::Sample) => "_bucket",
                    (_, ValueType::Sum) => "_sum",
                    (_, ValueType::Count) => "_count",
                    _ => "",
                };
                series
                    .entry(format!("{}{suffix}", metric.name))
                    .or_default()
                    .push((&sample.labels, sample.value.value.as_str()));
            }
        }
        Self { series }
    }

    /// The values of `name`'s samples that pass `only`. NaN and ±Inf are no reading of a
    /// gauge or a counter, so they are left out.
    fn values(&self, name: &str, only: Option<(&str, &[&str])>) -> Result<Vec<f64>, ParseError> {
        let Some(samples) = self.series.get(name) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (labels, raw) in samples {
            if let Some((key, wanted)) = only
                && !label(labels, key).is_some_and(|v| wanted.contains(&v))
            {
                continue;
            }
            let value = number(name, raw)?;
            if value.is_finite() {
                out.push(value);
            }
        }
        Ok(out)
    }

    /// The first of `names` on the page, its label sets combined.
    fn gauge(&self, names: &[&str], combine: Combine) -> Result<Option<f64>, ParseError> {
        for name in names {
            let values = self.values(name, None)?;
            if values.is_empty() {
                continue;
            }
            let total: f64 = values.iter().sum();
            return Ok(Some(match combine {
                Combine::Sum => total,
                Combine::Mean => total / values.len() as f64,
            }));
        }
        Ok(None)
    }

    /// The sum of every listed counter on the page.
    fn counter(&self, counters: &[Counter]) -> Result<Option<f64>, ParseError> {
        let mut total = None;
        for counter in counters {
            let values = self.values(counter.name, counter.only)?;
            if !values.is_empty() {
                *total.get_or_insert(0.0) += values.iter().sum::<f64>();
            }
        }
        Ok(total)
    }

    /// The first of `names` on the page, its label sets summed bucket by bucket.
    fn histogram(&self, names: &[&str]) -> Result<Option<Histogram>, ParseError> {
        for base in names {
            let bucket_name = format!("{base}_bucket");
            let count_name = format!("{base}_count");
            let counts = self.values(&count_name, None)?;
            let samples = self.series.get(&bucket_name);
            if samples.is_none() && counts.is_empty() {
                continue;
            }
            let mut buckets = Vec::new();
            for (labels, raw) in samples.into_iter().flatten() {
                let le = label(labels, "le")
                    .and_then(|le| le.parse::<f64>().ok())
                    .filter(|le| !le.is_nan())
                    .ok_or_else(|| {
                        ParseError(format!(
                            "{bucket_name} has a sample without a numeric `le` label"
                        ))
                    })?;
                let value = number(&bucket_name, raw)?;
                if value.is_finite() {
                    buckets.push((le, value));
                }
            }
            let buckets = coalesce(buckets);
            // `_count` is the `+Inf` bucket; a page without it still has that bucket.
            let count = if counts.is_empty() {
                buckets.last().map_or(0.0, |b| b.1)
            } else {
                counts.iter().sum()
            };
            let sum = self.values(&format!("{base}_sum"), None)?.iter().sum();
            return Ok(Some(Histogram {
                buckets,
                count,
                sum,
            }));
        }
        Ok(None)
    }
}

fn label<'l>(labels: &'l Labels, key: &str) -> Option<&'l str> {
    labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

fn number(name: &str, raw: &str) -> Result<f64, ParseError> {
    raw.parse::<f64>().map_err(|_| {
        ParseError(format!(
            "{name} has the value `{raw}`, which is not a number"
        ))
    })
}

/// The parser's message (winnow's: "parse error at line L, column C", then the line under a
/// gutter, or for a one-line page the line and a caret) as one line.
fn syntax_error(message: &str) -> ParseError {
    let lines: Vec<&str> = message.lines().collect();
    let (place, content) = match lines
        .first()
        .and_then(|l| l.strip_prefix("parse error at "))
    {
        Some(place) => {
            let content = lines
                .get(2)
                .and_then(|l| l.split_once(" | "))
                .map_or("", |(_, c)| c);
            (place.to_string(), content)
        }
        None => {
            let column = lines.get(1).and_then(|l| l.find('^')).map_or(1, |i| i + 1);
            (
                format!("line 1, column {column}"),
                lines.first().copied().unwrap_or(""),
            )
        }
    };
    ParseError(format!(
        "not the Prometheus text format: {place}: `{}`",
        shorten(content.trim_end())
    ))
}

/// At most 60 characters of a line, control characters blanked, to keep the error one
/// printable line.
fn shorten(line: &str) -> String {
    const MAX: usize = 60;
    let mut out: String = line
        .chars()
        .take(MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vLLM 0.10 page, as its PrometheusStatLogger (vllm/v1/metrics/loggers.py) and
    /// prometheus_client print it: two engine cores, `_created` series, and metrics the
    /// reader ignores. Figures per core: running 3 + 5, waiting 1 + 0, KV 0.25 / 0.75.
    const VLLM_PAGE: &str = r#"# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9
vllm:gpu_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.75
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8128.0
vllm:prompt_tokens_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1872.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7360654e+09
vllm:prompt_tokens_created{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7360654e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 27453.0
vllm:generation_tokens_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2547.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 31.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
vllm:request_success_total{engine="0",finished_reason="repetition",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16.0
vllm:request_success_total{engine="1",finished_reason="abort",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="meta-llama/Llama-3.1-8B-Instruct"} 13.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 120.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 134.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 134.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.02",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.5
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7360654e+09
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="meta-llama/Llama-3.1-8B-Instruct"} 999.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 999.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 999.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="meta-llama/Llama-3.1-8B-Instruct"} 100.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2500.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3000.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3000.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 60.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 50.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="5.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 130.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 134.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 134.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 180.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.9"} 1.0
"#;

    /// vLLM before 0.9 (the V0 engine): `gpu_cache_usage_perc`, `time_per_output_token`,
    /// one label set, only `stop` and `length` outcomes.
    const VLLM_OLD_PAGE: &str = r#"# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="facebook/opt-125m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="facebook/opt-125m"} 4.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.5
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="facebook/opt-125m"} 7.0
vllm:request_success_total{finished_reason="length",model_name="facebook/opt-125m"} 3.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="facebook/opt-125m"} 4.0
vllm:time_per_output_token_seconds_bucket{le="0.025",model_name="facebook/opt-125m"} 10.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="facebook/opt-125m"} 10.0
vllm:time_per_output_token_seconds_count{model_name="facebook/opt-125m"} 10.0
vllm:time_per_output_token_seconds_sum{model_name="facebook/opt-125m"} 0.15
"#;

    /// SGLang, as docs/references/production_metrics.md shows it, plus the request counters
    /// of collector.py. `sglang:num_aborted_requests_total` has no sample yet: a labelled
    /// prometheus_client counter prints only its HELP and TYPE lines until first used.
    const SGLANG_PAGE: &str = r#"# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0
# HELP sglang:num_aborted_requests_total Number of requests aborted.
# TYPE sglang:num_aborted_requests_total counter
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.3518979474117756e+06
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.0
sglang:time_to_first_token_seconds_bucket{le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 27.0
sglang:time_to_first_token_seconds_bucket{le="10.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1330.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.116093850019932e+06
sglang:e2e_request_latency_seconds_bucket{le="0.3",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
sglang:e2e_request_latency_seconds_bucket{le="60.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1513.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11228.0
sglang:e2e_request_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11228.0
# HELP sglang:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 866964.5791549598
sglang:time_per_output_token_seconds_bucket{le="0.05",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11685.0
sglang:time_per_output_token_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.950195e+06
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.400757e+06
sglang:time_per_output_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.400757e+06
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 162.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0
"#;

    /// TGI, as the metrics crate's Prometheus exporter prints what router/src/server.rs
    /// records: no labels, no failures yet (so no `tgi_request_failure` series).
    const TGI_PAGE: &str = r#"# TYPE tgi_request_count counter
tgi_request_count 12

# TYPE tgi_request_success counter
tgi_request_success 10

# TYPE tgi_queue_size gauge
tgi_queue_size 2

# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 4

# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 16000

# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="40.96"} 3
tgi_request_input_length_bucket{le="+Inf"} 12
tgi_request_input_length_sum 1500
tgi_request_input_length_count 12

# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="81.92"} 10
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum 640
tgi_request_generated_tokens_count 10

# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 2
tgi_request_duration_bucket{le="2"} 9
tgi_request_duration_bucket{le="+Inf"} 10
tgi_request_duration_sum 12.5
tgi_request_duration_count 10

# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.02"} 8
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 10
tgi_request_mean_time_per_token_duration_sum 0.19
tgi_request_mean_time_per_token_duration_count 10
"#;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn a_vllm_page_gives_every_figure_summed_over_engine_cores() {
        let m = read(MetricsDialect::Vllm, VLLM_PAGE).unwrap();
        assert_eq!(m.running, Some(8.0));
        assert_eq!(m.waiting, Some(1.0));
        // The current name wins over the deprecated one, and cores are averaged.
        assert!(close(m.kv_cache_usage, 0.5), "{:?}", m.kv_cache_usage);
        assert_eq!(m.finished, Some(150.0));
        // abort and error are failures; stop, length and repetition are not.
        assert_eq!(m.failed, Some(3.0));
        assert_eq!(m.prompt_tokens, Some(10_000.0));
        assert_eq!(m.generation_tokens, Some(30_000.0));
        let ttft = m.ttft.unwrap();
        assert_eq!(
            ttft.buckets,
            vec![
                (0.001, 0.0),
                (0.02, 14.0),
                (0.1, 130.0),
                (f64::INFINITY, 150.0)
            ]
        );
        assert_eq!(ttft.count, 150.0);
        assert_eq!(ttft.sum, 8.0);
        // The new inter-token name wins over the deprecated one.
        assert_eq!(m.inter_token.unwrap().count, 3000.0);
        let e2e = m.e2e.unwrap();
        assert_eq!(e2e.buckets.len(), 4);
        assert_eq!(e2e.sum, 180.25);
    }

    #[test]
    fn an_older_vllm_page_is_read_by_its_older_names() {
        let m = read(MetricsDialect::Vllm, VLLM_OLD_PAGE).unwrap();
        assert_eq!(m.running, Some(2.0));
        assert_eq!(m.waiting, Some(4.0));
        assert_eq!(m.kv_cache_usage, Some(0.5));
        assert_eq!(m.finished, Some(10.0));
        // The outcome counter is there without a failure outcome: none failed.
        assert_eq!(m.failed, Some(0.0));
        let itl = m.inter_token.unwrap();
        assert_eq!(
            itl.buckets,
            vec![(0.01, 4.0), (0.025, 10.0), (f64::INFINITY, 10.0)]
        );
        // Not on this page: unknown, never zero.
        assert_eq!(m.prompt_tokens, None);
        assert_eq!(m.generation_tokens, None);
        assert_eq!(m.ttft, None);
        assert_eq!(m.e2e, None);
    }

    #[test]
    fn a_sglang_page_is_read_by_sglang_names() {
        let m = read(MetricsDialect::Sglang, SGLANG_PAGE).unwrap();
        assert_eq!(m.running, Some(162.0));
        assert_eq!(m.waiting, Some(2826.0));
        assert_eq!(m.kv_cache_usage, Some(0.28));
        assert_eq!(m.finished, Some(11008.0));
        // Declared but never incremented: zero aborted.
        assert_eq!(m.failed, Some(0.0));
        assert_eq!(m.prompt_tokens, Some(8_128_902.0));
        assert_eq!(m.generation_tokens, Some(7_557_572.0));
        assert_eq!(m.ttft.unwrap().count, 11008.0);
        // This release has only the older inter-token name.
        assert_eq!(m.inter_token.unwrap().count, 7_400_757.0);
        assert_eq!(
            m.e2e.unwrap().buckets.last(),
            Some(&(f64::INFINITY, 11228.0))
        );
    }

    #[test]
    fn a_tgi_page_is_read_by_tgi_names_and_lacks_what_tgi_does_not_publish() {
        let m = read(MetricsDialect::Tgi, TGI_PAGE).unwrap();
        assert_eq!(m.running, Some(4.0));
        assert_eq!(m.waiting, Some(2.0));
        assert_eq!(m.kv_cache_usage, None);
        assert_eq!(m.finished, Some(10.0));
        assert_eq!(m.failed, Some(0.0));
        assert_eq!(m.prompt_tokens, Some(1500.0));
        assert_eq!(m.generation_tokens, Some(640.0));
        assert_eq!(m.ttft, None);
        assert_eq!(m.inter_token.unwrap().count, 10.0);
        assert_eq!(
            m.e2e.unwrap().buckets,
            vec![(0.5, 2.0), (2.0, 9.0), (f64::INFINITY, 10.0)]
        );
    }

    #[test]
    fn tgi_failures_count_among_the_finished_requests() {
        let page = format!(
            "{TGI_PAGE}\n# TYPE tgi_request_failure counter\ntgi_request_failure{{err=\"validation\"}} 1\ntgi_request_failure{{err=\"generation\"}} 2\n"
        );
        let m = read(MetricsDialect::Tgi, &page).unwrap();
        assert_eq!(m.finished, Some(13.0));
        assert_eq!(m.failed, Some(3.0));
    }

    #[test]
    fn a_page_of_another_engine_gives_nothing() {
        let m = read(MetricsDialect::Vllm, TGI_PAGE).unwrap();
        assert!(m.is_empty(), "{m:?}");
        let m = read(MetricsDialect::Tgi, VLLM_PAGE).unwrap();
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn an_empty_page_gives_nothing() {
        for page in ["", "\n", "  \n\t\n"] {
            assert!(read(MetricsDialect::Vllm, page).unwrap().is_empty());
        }
        // Only comments and metadata: still nothing, and no error.
        let page =
            "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n";
        assert!(read(MetricsDialect::Vllm, page).unwrap().is_empty());
    }

    #[test]
    fn the_unknown_dialect_reads_nothing_even_from_a_vllm_page() {
        assert!(read(MetricsDialect::Unknown, VLLM_PAGE).unwrap().is_empty());
        assert!(read(MetricsDialect::Unknown, "<html>").unwrap().is_empty());
    }

    #[test]
    fn garbage_is_an_error_in_one_line_not_a_panic() {
        let pages = [
            "<html><body>502 Bad Gateway</body></html>",
            "{\"error\": \"not found\"}",
            "vllm:num_requests_running 3\nthis is not a metric\n",
            "vllm:num_requests_running{model_name=\"x} 1\n",
            "vllm:num_requests_running{model_name=\"x\"} abc\n",
            "# TYPE a gauge\na 1\nb{=\"\"} 2\n",
            "\u{0}\u{1}\u{fffd}",
        ];
        for page in pages {
            let err = read(MetricsDialect::Vllm, page).unwrap_err().to_string();
            assert!(!err.contains('\n'), "{err}");
            assert!(
                err.starts_with("not the Prometheus text format: line "),
                "{err}"
            );
        }
        let err = read(MetricsDialect::Vllm, pages[2])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "not the Prometheus text format: line 2, column 1: `this is not a metric`"
        );
        // A long line is cut short.
        let long = format!("{} 1 2 3\n", "x".repeat(200));
        let err = read(MetricsDialect::Vllm, &long).unwrap_err().to_string();
        assert!(err.chars().count() < 140, "{err}");
    }

    #[test]
    fn nan_and_infinite_values_are_no_reading() {
        let page = r#"# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} NaN
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} +Inf
vllm:num_requests_waiting{engine="1"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} -Inf
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1"} 1
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 2
vllm:e2e_request_latency_seconds_sum NaN
vllm:e2e_request_latency_seconds_count 2
"#;
        let m = read(MetricsDialect::Vllm, page).unwrap();
        assert_eq!(m.running, None);
        assert_eq!(m.waiting, Some(2.0));
        // The current name has no usable value, so the older one is read.
        assert_eq!(m.kv_cache_usage, Some(0.5));
        let e2e = m.e2e.unwrap();
        assert_eq!(e2e.buckets, vec![(1.0, 1.0), (f64::INFINITY, 2.0)]);
        assert_eq!(e2e.count, 2.0);
        assert_eq!(e2e.sum, 0.0);
    }

    #[test]
    fn an_untyped_page_reads_like_a_typed_one() {
        let page = "vllm:e2e_request_latency_seconds_bucket{le=\"1\"} 3\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 4\nvllm:e2e_request_latency_seconds_count 4\nvllm:e2e_request_latency_seconds_sum 2.5\nvllm:request_success_total{finished_reason=\"stop\"} 4\n";
        let m = read(MetricsDialect::Vllm, page).unwrap();
        assert_eq!(
            m.e2e,
            Some(Histogram {
                buckets: vec![(1.0, 3.0), (f64::INFINITY, 4.0)],
                count: 4.0,
                sum: 2.5,
            })
        );
        assert_eq!(m.finished, Some(4.0));
    }

    #[test]
    fn a_bucket_without_a_numeric_le_is_an_error() {
        let page = "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"fast\"} 3\nvllm:e2e_request_latency_seconds_count 3\n";
        let err = read(MetricsDialect::Vllm, page).unwrap_err().to_string();
        assert_eq!(
            err,
            "vllm:e2e_request_latency_seconds_bucket has a sample without a numeric `le` label"
        );
    }

    #[test]
    fn histograms_add_bucket_by_bucket() {
        let mut a = Histogram {
            buckets: vec![(0.1, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)],
            count: 3.0,
            sum: 1.0,
        };
        let b = Histogram {
            buckets: vec![(f64::INFINITY, 5.0), (0.1, 4.0), (1.0, 5.0)],
            count: 5.0,
            sum: 0.5,
        };
        a.add(&b);
        assert_eq!(
            a.buckets,
            vec![(0.1, 5.0), (1.0, 7.0), (f64::INFINITY, 8.0)]
        );
        assert_eq!((a.count, a.sum), (8.0, 1.5));
    }
}

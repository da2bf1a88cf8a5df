//! Which metric names each model server publishes for the figures modelplane reads, and
//! which dialect a pod speaks, from its engine label.

use crate::domain::MetricsDialect;

/// A counter on a `/metrics` page: the samples of `name`, or only those whose label
/// `only.0` takes one of the values `only.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub name: &'static str,
    pub only: Option<(&'static str, &'static [&'static str])>,
}

impl Counter {
    const fn all(name: &'static str) -> Self {
        Self { name, only: None }
    }

    const fn only(
        name: &'static str,
        label: &'static str,
        values: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            only: Some((label, values)),
        }
    }
}

/// Where one dialect publishes each figure. An empty list means the engine does not publish
/// that figure at all, so it stays `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricNames {
    /// Gauges: names in order of preference (the current name first, then older names); the
    /// first one on the page is read.
    pub running: &'static [&'static str],
    pub waiting: &'static [&'static str],
    /// A 0..1 gauge, read like the others.
    pub kv_cache_usage: &'static [&'static str],
    /// Counters: every listed counter on the page is added up.
    pub finished: &'static [Counter],
    /// The part of `finished` that ended in an error or was aborted.
    pub failed: &'static [Counter],
    pub prompt_tokens: &'static [Counter],
    pub generation_tokens: &'static [Counter],
    /// Histograms in seconds: base names (without `_bucket`) in order of preference.
    pub ttft: &'static [&'static str],
    pub inter_token: &'static [&'static str],
    pub e2e: &'static [&'static str],
}

// vLLM: vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger) and
// docs/design/metrics.md. Every series carries `model_name` and `engine` labels (one label
// set per engine core). `vllm:gpu_cache_usage_perc` was renamed `vllm:kv_cache_usage_perc`
// in 0.9 and `vllm:time_per_output_token_seconds` became `vllm:inter_token_latency_seconds`.
// `finished_reason` takes the values of vllm/v1/engine/__init__.py FINISH_REASON_STRINGS:
// stop, length, abort ("aborted by client"), error ("request-level internal error"),
// repetition; abort and error are the failures.
static VLLM: MetricNames = MetricNames {
    running: &["vllm:num_requests_running"],
    waiting: &["vllm:num_requests_waiting"],
    kv_cache_usage: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    finished: &[Counter::all("vllm:request_success_total")],
    failed: &[Counter::only(
        "vllm:request_success_total",
        "finished_reason",
        &["abort", "error"],
    )],
    prompt_tokens: &[Counter::all("vllm:prompt_tokens_total")],
    generation_tokens: &[Counter::all("vllm:generation_tokens_total")],
    ttft: &["vllm:time_to_first_token_seconds"],
    inter_token: &[
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    ],
    e2e: &["vllm:e2e_request_latency_seconds"],
};

// SGLang: sgl-project/sglang python/sglang/srt/metrics/collector.py
// (SchedulerMetricsCollector, TokenizerMetricsCollector) and
// docs/references/production_metrics.md. `sglang:token_usage` is the fraction of the KV
// token pool in use. `sglang:num_requests_total` counts requests finished through the
// output path (observe_one_finished_request); `sglang:num_aborted_requests_total` counts
// abort calls (observe_one_aborted_request). Older releases publish
// `sglang:time_per_output_token_seconds` instead of `sglang:inter_token_latency_seconds`.
static SGLANG: MetricNames = MetricNames {
    running: &["sglang:num_running_reqs"],
    waiting: &["sglang:num_queue_reqs"],
    kv_cache_usage: &["sglang:token_usage"],
    finished: &[Counter::all("sglang:num_requests_total")],
    failed: &[Counter::all("sglang:num_aborted_requests_total")],
    prompt_tokens: &[Counter::all("sglang:prompt_tokens_total")],
    generation_tokens: &[Counter::all("sglang:generation_tokens_total")],
    ttft: &["sglang:time_to_first_token_seconds"],
    inter_token: &[
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ],
    e2e: &["sglang:e2e_request_latency_seconds"],
};

// TGI: huggingface/text-generation-inference docs/source/reference/metrics.md and
// router/src/server.rs (where the counters are incremented and the histogram buckets set).
// `tgi_request_count` counts requests as they arrive, so finished is success + failure
// (`tgi_request_failure` carries an `err` label: validation, overloaded, generation, …).
// Tokens have no counters: the `_sum` of the per-request histograms
// `tgi_request_input_length` (observed at validation) and `tgi_request_generated_tokens`
// only grows, so it is read as one. TGI publishes no time to first token and no KV-cache
// use; `tgi_request_mean_time_per_token_duration` is each request's mean inter-token time.
static TGI: MetricNames = MetricNames {
    running: &["tgi_batch_current_size"],
    waiting: &["tgi_queue_size"],
    kv_cache_usage: &[],
    finished: &[
        Counter::all("tgi_request_success"),
        Counter::all("tgi_request_failure"),
    ],
    failed: &[Counter::all("tgi_request_failure")],
    prompt_tokens: &[Counter::all("tgi_request_input_length_sum")],
    generation_tokens: &[Counter::all("tgi_request_generated_tokens_sum")],
    ttft: &[],
    inter_token: &["tgi_request_mean_time_per_token_duration"],
    e2e: &["tgi_request_duration"],
};

static UNKNOWN: MetricNames = MetricNames {
    running: &[],
    waiting: &[],
    kv_cache_usage: &[],
    finished: &[],
    failed: &[],
    prompt_tokens: &[],
    generation_tokens: &[],
    ttft: &[],
    inter_token: &[],
    e2e: &[],
};

/// The metric names of a dialect.
pub fn names_of(dialect: MetricsDialect) -> &'static MetricNames {
    match dialect {
        MetricsDialect::Vllm => &VLLM,
        MetricsDialect::Sglang => &SGLANG,
        MetricsDialect::Tgi => &TGI,
        MetricsDialect::Unknown => &UNKNOWN,
    }
}

/// The dialect of a pod from its `modelplane.io/engine` label (the values
/// `EngineKind::as_str` writes). The `sim` engine serves vLLM's names, as
/// llm-d-inference-sim does; anything else is a server whose metrics modelplane does not know.
pub fn dialect_of(engine_label: &str) -> MetricsDialect {
    match engine_label {
        "vllm" | "sim" => MetricsDialect::Vllm,
        "sglang" => MetricsDialect::Sglang,
        "tgi" => MetricsDialect::Tgi,
        _ => MetricsDialect::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [MetricsDialect; 4] = [
        MetricsDialect::Vllm,
        MetricsDialect::Sglang,
        MetricsDialect::Tgi,
        MetricsDialect::Unknown,
    ];

    fn every_name(n: &MetricNames) -> Vec<&'static str> {
        let counters = [n.finished, n.failed, n.prompt_tokens, n.generation_tokens];
        let plain = [
            n.running,
            n.waiting,
            n.kv_cache_usage,
            n.ttft,
            n.inter_token,
            n.e2e,
        ];
        counters
            .iter()
            .flat_map(|c| c.iter().map(|c| c.name))
            .chain(plain.iter().flat_map(|p| p.iter().copied()))
            .collect()
    }

    #[test]
    fn engine_labels_map_to_their_dialects() {
        assert_eq!(dialect_of("vllm"), MetricsDialect::Vllm);
        assert_eq!(dialect_of("sim"), MetricsDialect::Vllm);
        assert_eq!(dialect_of("sglang"), MetricsDialect::Sglang);
        assert_eq!(dialect_of("tgi"), MetricsDialect::Tgi);
        for other in ["custom", "", "VLLM", "triton", "llama.cpp"] {
            assert_eq!(dialect_of(other), MetricsDialect::Unknown, "{other}");
        }
    }

    #[test]
    fn each_dialect_names_only_its_own_series() {
        let prefix = |d: MetricsDialect| match d {
            MetricsDialect::Vllm => "vllm:",
            MetricsDialect::Sglang => "sglang:",
            MetricsDialect::Tgi => "tgi_",
            MetricsDialect::Unknown => "",
        };
        for d in ALL {
            for name in every_name(names_of(d)) {
                assert!(name.starts_with(prefix(d)), "{name} in {d:?}");
            }
        }
    }

    #[test]
    fn unknown_engines_publish_nothing_modelplane_reads() {
        assert!(every_name(names_of(MetricsDialect::Unknown)).is_empty());
    }

    #[test]
    fn figures_an_engine_does_not_publish_are_mapped_to_nothing() {
        let tgi = names_of(MetricsDialect::Tgi);
        assert!(tgi.ttft.is_empty());
        assert!(tgi.kv_cache_usage.is_empty());
        // Every known dialect publishes the rest.
        for d in [
            MetricsDialect::Vllm,
            MetricsDialect::Sglang,
            MetricsDialect::Tgi,
        ] {
            let n = names_of(d);
            for list in [n.running, n.waiting, n.inter_token, n.e2e] {
                assert!(!list.is_empty(), "{d:?}");
            }
            for list in [n.finished, n.failed, n.prompt_tokens, n.generation_tokens] {
                assert!(!list.is_empty(), "{d:?}");
            }
        }
    }

    #[test]
    fn vllm_failures_are_aborted_or_errored_requests() {
        let failed = names_of(MetricsDialect::Vllm).failed;
        assert_eq!(
            failed,
            &[Counter::only(
                "vllm:request_success_total",
                "finished_reason",
                &["abort", "error"]
            )]
        );
    }
}

//! The built-in `sim` model server engine: the OpenAI-compatible simulator that pods of
//! modelplane's `sim` engine answer with, as llm-d-inference-sim
//! (github.com/llm-d/llm-d-inference-sim) does in echo mode: its latency flags
//! (`--time-to-first-token`, `--inter-token-latency`), `--max-num-seqs` slots for which
//! requests run or wait, vLLM-style `/metrics` (vLLM's PrometheusStatLogger,
//! vllm/v1/metrics/loggers.py in github.com/vllm-project/vllm) measured from the
//! requests the pod really answered, and the LoRA adapters of `--lora-modules` and its
//! runtime adapter API (pkg/llm-d-inference-sim/lora.go). The data plane (`mod.rs`)
//! hands it the requests that reach a sim pod.
//!
//! One file (about 870 lines before its tests): it is one engine, whose answers, slots and
//! `/metrics` figures share the per-pod records it keeps.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::{InFlight, PodLoad, json_resp, text};

/// A sim process's LoRA adapters: those of `--lora-modules` when it starts, then what
/// `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` add and remove (llm-d-inference-sim
/// pkg/llm-d-inference-sim/lora.go keeps them in memory: a restarted process has only its
/// `--lora-modules` again).
pub(super) struct Loras {
    pub(super) incarnation: i64,
    pub(super) initial: BTreeSet<String>,
    pub(super) names: BTreeSet<String>,
}

/// A request waiting for a sim slot (a client that goes away stops waiting).
struct Waiting(Arc<PodLoad>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request holding one of a sim pod's `--max-num-seqs` slots.
struct Running(Arc<PodLoad>, #[allow(dead_code)] OwnedSemaphorePermit);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PodLoad {
    /// Waits for a free slot, counted as waiting meanwhile (vLLM's scheduler queue).
    async fn admit(self: &Arc<Self>) -> Option<Running> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting(self.clone());
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        self.running.fetch_add(1, Ordering::SeqCst);
        drop(waiting);
        Some(Running(self.clone(), permit))
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the served figures over when the pod's sim container has restarted since
    /// they began: a new process, whose counters start from zero (a Prometheus counter
    /// reset). A view of the pod older than the figures changes nothing.
    pub(super) fn follow_restarts(&self, incarnation: i64) {
        let mut served = self.served();
        if incarnation > served.incarnation {
            *served = Served::new(incarnation);
        }
        let mut loras = self.loras();
        if incarnation > loras.incarnation {
            loras.incarnation = incarnation;
            loras.names = loras.initial.clone();
        }
    }

    fn loras(&self) -> std::sync::MutexGuard<'_, Loras> {
        self.loras.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds to the served figures what a request of process `incarnation` did; nothing
    /// when that process has since restarted (the request died with it).
    fn record(&self, incarnation: i64, f: impl FnOnce(&mut Served)) {
        let mut served = self.served();
        if served.incarnation == incarnation {
            f(&mut served);
        }
    }
}

/// llm-d-inference-sim's default `--max-num-seqs` (pkg/common/config.go in
/// github.com/llm-d/llm-d-inference-sim).
pub(super) const DEFAULT_MAX_NUM_SEQS: usize = 5;

/// What a `sim` engine pod was started with (its container's command and args).
pub(crate) struct SimConfig {
    /// The served model (`--model`).
    pub model: String,
    /// `--time-to-first-token`: before the first token of an answer.
    pub ttft: Duration,
    /// `--inter-token-latency`: before each further token.
    pub itl: Duration,
    /// `--max-num-seqs`: requests processed at the same time; more wait in a queue.
    pub max_num_seqs: usize,
    /// The adapter names of `--lora-modules` (each value a JSON object with `name`, as
    /// llm-d-inference-sim's README gives them), served from the start.
    pub lora_modules: BTreeSet<String>,
    /// vLLM's multi-node flags (`multinode.rs`).
    pub multinode: super::multinode::MultiNode,
}

/// A duration flag of llm-d-inference-sim: a Go duration (`100ms`, `1.5s`, `1m30s`), as
/// its flags take them since v0.7.0, or a plain integer in milliseconds, the format of
/// the releases before (v0.5.1, which modelplane runs, declares `time-to-first-token`
/// and `inter-token-latency` as ints "in milliseconds" in pkg/common/config.go).
pub(crate) fn sim_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Some(Duration::from_millis(ms));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let mut secs = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, after) = rest.split_at(num_end);
        let n: f64 = num.parse().ok()?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let mult = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        secs += n * mult;
        rest = next;
    }
    Some(Duration::from_secs_f64(secs))
}

/// The configuration of a `sim` engine pod, or None for pods that run anything else.
pub(crate) fn sim_config(pod: &Value) -> Option<SimConfig> {
    let labelled = pod
        .pointer("/metadata/labels/modelplane.io~1engine")
        .and_then(Value::as_str)
        == Some("sim");
    let c = pod.pointer("/spec/containers/0")?;
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    if !labelled && !image.contains("llm-d-inference-sim") {
        return None;
    }
    // The kubelet expands `$(VAR)` references from the container's env before it starts
    // the process (`expansion.rs`), so the flags are read as the process sees them.
    let expanded = crate::cluster::expansion::command_and_args(c);
    let args: Vec<&str> = expanded.iter().map(String::as_str).collect();
    // `--name value` or `--name=value`; vLLM's parser also takes `_` for `-` in long
    // names (FlexibleArgumentParser, vllm/utils) and the short aliases of arg_utils.py.
    let flag_of = |names: &[&str]| {
        args.iter().enumerate().find_map(|(i, a)| {
            names.iter().find_map(|name| {
                let norm = |s: &str| {
                    if s.starts_with("--") {
                        s.replace('_', "-")
                    } else {
                        s.to_string()
                    }
                };
                let (key, value) = match a.split_once('=') {
                    Some((k, v)) if k.starts_with('-') => (norm(k), Some(v.to_string())),
                    _ => (norm(a), None),
                };
                (key == *name).then(|| value.or_else(|| args.get(i + 1).map(|s| s.to_string())))?
            })
        })
    };
    let flag = |name: &str| flag_of(&[&format!("--{name}")]);
    let duration = |name: &str| {
        flag(name)
            .and_then(|v| sim_duration(&v))
            .unwrap_or(Duration::ZERO)
    };
    // `--lora-modules '{"name":…}' '{"name":…}'`: the values up to the next flag.
    let lora_modules = args
        .iter()
        .position(|a| *a == "--lora-modules")
        .map(|at| {
            args[at + 1..]
                .iter()
                .take_while(|a| !a.starts_with("--"))
                .filter_map(|v| serde_json::from_str::<Value>(v).ok())
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let number = |names: &[&str], default: u32| {
        flag_of(names)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(default)
    };
    let defaults = super::multinode::MultiNode::default();
    let multinode = super::multinode::MultiNode {
        nnodes: number(&["--nnodes", "-n"], 1),
        node_rank: number(&["--node-rank", "-r"], 0),
        master_addr: flag("master-addr").unwrap_or(defaults.master_addr),
        master_port: flag("master-port").unwrap_or(defaults.master_port),
        headless: args.contains(&"--headless"),
        world_size: number(&["--tensor-parallel-size", "-tp"], 1)
            * number(&["--pipeline-parallel-size", "-pp"], 1),
    };
    Some(SimConfig {
        multinode,
        lora_modules,
        model: flag("model").unwrap_or_else(|| "sim-model".into()),
        ttft: duration("time-to-first-token"),
        itl: duration("inter-token-latency"),
        max_num_seqs: flag("max-num-seqs")
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_NUM_SEQS),
    })
}

fn words(s: &str) -> usize {
    s.split_whitespace().count().max(1)
}

fn openai_error(code: StatusCode, ty: &str, msg: &str) -> Response {
    json_resp(
        code,
        &json!({"error": {"message": msg, "type": ty, "param": null, "code": code.as_u16()}}),
    )
}

// A sim pod's serving figures, as vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py
// in github.com/vllm-project/vllm) and llm-d-inference-sim, the simulator the emulator
// imitates (pkg/llm-d-inference-sim/metrics.go, docs/metrics.md), export them, measured
// from the requests the pod really answered. The histograms' bucket boundaries are
// vLLM's (loggers.py; vllm/v1/metrics/buckets.py in later releases), which the simulator
// copies in pkg/common/utils.go (TTFTBucketsBoundaries, TPOTBucketsBoundaries,
// RequestLatencyBucketsBoundaries).

/// `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `vllm:inter_token_latency_seconds` and `vllm:time_per_output_token_seconds`.
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// `vllm:e2e_request_latency_seconds`.
const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Why a request finished: vLLM's FinishReason (vllm/v1/engine/__init__.py), the value of
/// the `finished_reason` label of `vllm:request_success_total` (later vLLM releases add
/// `error` and `repetition`, which the simulator never gives).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Finish {
    /// The answer ended on its own.
    Stop,
    /// The answer was cut at max_tokens.
    Length,
    /// The client went away before the end.
    Abort,
}

impl Finish {
    const ALL: [Finish; 3] = [Finish::Stop, Finish::Length, Finish::Abort];

    fn label(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// A Prometheus histogram: observations per bucket (not cumulative; the exposition
/// accumulates them), their sum and count.
struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, d: Duration) {
        let v = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// What one run of a sim pod's process (one `incarnation` of its container) has served.
pub(super) struct Served {
    /// The container's restartCount when these figures began.
    incarnation: i64,
    prompt_tokens: u64,
    generation_tokens: u64,
    /// Finished requests, by `Finish` (in `Finish::ALL` order).
    finished: [u64; 3],
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl Served {
    pub(super) fn new(incarnation: i64) -> Served {
        Served {
            incarnation,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: [0; 3],
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
        }
    }
}

/// One completion request's course through a sim pod, recorded into its figures as it
/// goes, as vLLM's frontend records them (docs/design/metrics.md, "Interval
/// Calculations" and "Frontend Stats Collection"): the time to first token from the
/// request's arrival (so the wait for a slot counts), an inter-token latency between
/// successive tokens, the prompt tokens once prefill is done (the first token) and each
/// generated token when it is produced, and at the end the finish reason and the
/// end-to-end latency from arrival to the final token. Dropped before it finished (the
/// client went away: axum drops the handler, or hyper the streamed body), it finishes
/// as `abort`.
struct Course {
    load: Arc<PodLoad>,
    incarnation: i64,
    arrival: Instant,
    prompt_tokens: u64,
    generated: u64,
    last_token: Option<Instant>,
    done: bool,
}

impl Course {
    fn new(load: Arc<PodLoad>, incarnation: i64, arrival: Instant, prompt_tokens: usize) -> Course {
        Course {
            load,
            incarnation,
            arrival,
            prompt_tokens: prompt_tokens as u64,
            generated: 0,
            last_token: None,
            done: false,
        }
    }

    /// A token is produced now; returns when.
    fn token(&mut self) -> Instant {
        let now = Instant::now();
        let (arrival, prompt, last) = (self.arrival, self.prompt_tokens, self.last_token);
        self.load.record(self.incarnation, |s| {
            match last {
                None => {
                    s.ttft.observe(now - arrival);
                    s.prompt_tokens += prompt;
                }
                Some(last) => s.itl.observe(now - last),
            }
            s.generation_tokens += 1;
        });
        self.generated += 1;
        self.last_token = Some(now);
        now
    }

    fn finish(&mut self, why: Finish) {
        if self.done {
            return;
        }
        self.done = true;
        let now = Instant::now();
        // An answer of no tokens still had its prompt processed (unless it was aborted
        // before that).
        let prompt = if self.last_token.is_none() && why != Finish::Abort {
            self.prompt_tokens
        } else {
            0
        };
        let e2e = now - self.arrival;
        self.load.record(self.incarnation, |s| {
            s.prompt_tokens += prompt;
            s.finished[why as usize] += 1;
            s.e2e.observe(e2e);
        });
    }
}

impl Drop for Course {
    fn drop(&mut self) {
        self.finish(Finish::Abort);
    }
}

/// Sleeps until `t` (not at all when it has passed).
async fn until(t: Instant) {
    if t > Instant::now() {
        tokio::time::sleep_until(t).await;
    }
}

/// A label value in the text exposition format: backslash, double quote and line feed
/// escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `# HELP` and `# TYPE` lines of a metric family (once per family).
fn family(out: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
}

/// A histogram's `_bucket` series (cumulative, ending with `le="+Inf"`), `_sum` and
/// `_count`.
fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    family(out, name, "histogram", help);
    let mut cumulative = 0;
    for (i, n) in h.counts.iter().enumerate() {
        cumulative += n;
        let le = h.bounds.get(i).map_or("+Inf".to_string(), f64::to_string);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// A sim pod's `/metrics`, in the Prometheus text exposition format 0.0.4, every series
/// labelled `model_name`:
///
/// - vLLM's gauges of running and waiting requests and KV-cache use (names and help as
///   llm-d-inference-sim exports them; the older `vllm:gpu_cache_usage_perc` name too).
///   The emulator models the KV cache as filled in proportion to the running requests:
///   running / max-num-seqs.
/// - the counters `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` and
///   `vllm:request_success_total` by `finished_reason`, whose `stop`, `length` and
///   `abort` series are there from zero (vLLM creates a child per FinishReason when it
///   starts). The label is vLLM's `finished_reason`; llm-d-inference-sim names it
///   `finish_reason` (PromLabelFinishReason in pkg/api/vllm-models.go), which a
///   collector written for vLLM would not find. Aborted requests are counted as
///   `abort`, as the label means; vLLM releases up to at least 0.13 leave that series
///   at 0 because their abort path skips the finished-request stats
///   (vllm-project/vllm#31503), while counting the tokens an aborted request had
///   processed (vllm-project/vllm#55634), as here.
/// - the histograms `vllm:time_to_first_token_seconds`,
///   `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, and
///   `vllm:time_per_output_token_seconds`, the name vLLM 0.11 deprecated for the
///   inter-token latency (hidden since 0.12) and which llm-d-inference-sim still
///   exports with the same observations (its `tpotUpdater` observes both).
///
/// The prompt tokens are the words the sim counts for `usage.prompt_tokens`, the
/// generation tokens the completion tokens it produced. The figures belong to the
/// process: a restarted container (or a new pod) starts them from zero.
fn metrics(model: &str, load: &PodLoad) -> Response {
    let running = load.running.load(Ordering::SeqCst);
    let waiting = load.waiting.load(Ordering::SeqCst);
    let usage = (running as f64 / load.max_num_seqs as f64).min(1.0);
    let labels = format!("model_name=\"{}\"", label_value(model));
    let mut out = String::new();
    for (name, help, value) in [
        (
            "vllm:num_requests_running",
            "Number of requests currently running on GPU.",
            running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Prometheus metric for the number of queued requests.",
            waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).",
            usage,
        ),
        (
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            usage,
        ),
    ] {
        family(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
    let served = load.served();
    for (name, help, value) in [
        (
            "vllm:prompt_tokens_total",
            "Total number of prompt tokens processed.",
            served.prompt_tokens,
        ),
        (
            "vllm:generation_tokens_total",
            "Total number of generated tokens.",
            served.generation_tokens,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
    let name = "vllm:request_success_total";
    family(
        &mut out,
        name,
        "counter",
        "Count of successfully processed requests.",
    );
    for why in Finish::ALL {
        let _ = writeln!(
            out,
            "{name}{{{labels},finished_reason=\"{}\"}} {}",
            why.label(),
            served.finished[why as usize]
        );
    }
    for (name, help, h) in [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &served.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &served.itl,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &served.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            &served.e2e,
        ),
    ] {
        histogram(&mut out, name, help, &labels, h);
    }
    drop(served);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// The OpenAI-compatible simulator (as llm-d-inference-sim in echo mode: the answer
/// repeats the last user message, cut to max_tokens words). A completion waits for one
/// of the pod's `--max-num-seqs` slots, then `--time-to-first-token` before its first
/// token and `--inter-token-latency` after each token before the next (as the
/// simulator's `simulateTTFT` and `simulateInterTokenLatency` sleep, in
/// pkg/llm-d-inference-sim/context.go); streamed answers send each token when it is
/// produced. Each completion's course is recorded for `/metrics` (`Course`); `incarnation`
/// is the restart count of the pod's container the request reached.
pub(super) async fn openai(
    sim: &SimConfig,
    in_flight: InFlight,
    incarnation: i64,
    method: &Method,
    path: &str,
    body: &Bytes,
) -> Response {
    // The request's arrival at the pod, from which vLLM measures the time to first
    // token and the end-to-end latency.
    let arrival = Instant::now();
    let model = sim.model.as_str();
    let created = chrono::Utc::now().timestamp();
    match (method.as_str(), path) {
        ("GET", "/health" | "/ready") => text(StatusCode::OK, "OK"),
        ("GET", "/metrics") => metrics(model, &in_flight.0),
        // The base model, then each adapter with the model as its parent and itself as
        // its root (`createModelsResponse` in llm-d-inference-sim).
        ("GET", "/v1/models") => {
            let mut data = vec![
                json!({"id": model, "object": "model", "created": created, "owned_by": "modelplane-emulator", "root": model, "parent": null}),
            ];
            data.extend(in_flight.0.loras().names.iter().map(|lora| {
                json!({"id": lora, "object": "model", "created": created, "owned_by": "modelplane-emulator", "root": lora, "parent": model})
            }));
            json_resp(StatusCode::OK, &json!({"object": "list", "data": data}))
        }
        // llm-d-inference-sim's `loadLoraAdaptor`/`unloadLoraAdaptor`: a body that does not
        // parse is a 400 in plain text; otherwise 200 with an empty body, whether or not
        // the adapter was there (the path is not read).
        ("POST", "/v1/load_lora_adapter" | "/v1/unload_lora_adapter") => {
            let load = path == "/v1/load_lora_adapter";
            let what = if load { "load" } else { "unload" };
            let name = serde_json::from_slice::<Value>(body)
                .map_err(|e| e.to_string())
                .and_then(|v| match v.get("lora_name") {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(name)) => Ok(name.clone()),
                    Some(_) => Err("lora_name is not a string".to_owned()),
                });
            match name {
                Err(err) => text(
                    StatusCode::BAD_REQUEST,
                    &format!("failed to read and parse {what} lora request body, {err}"),
                ),
                Ok(name) => {
                    let mut loras = in_flight.0.loras();
                    if load {
                        loras.names.insert(name);
                    } else {
                        loras.names.remove(&name);
                    }
                    (StatusCode::OK, "").into_response()
                }
            }
        }
        ("POST", "/v1/chat/completions" | "/v1/completions") => {
            let chat = path == "/v1/chat/completions";
            let Ok(req) = serde_json::from_slice::<Value>(body) else {
                return openai_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequestError",
                    "the request body is not valid JSON",
                );
            };
            let asked = req.get("model").and_then(Value::as_str).unwrap_or("");
            if asked != model && !in_flight.0.loras().names.contains(asked) {
                return openai_error(
                    StatusCode::NOT_FOUND,
                    "NotFoundError",
                    &format!("The model `{asked}` does not exist."),
                );
            }
            // The answer names the model asked for: the base model or an adapter.
            let model = asked.to_owned();
            let (prompt_text, last) = if chat {
                let msgs = req
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let content = |m: &Value| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                let all: Vec<String> = msgs.iter().map(content).collect();
                let last = msgs
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(content)
                    .unwrap_or_default();
                (all.join(" "), last)
            } else {
                let p = match req.get("prompt") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                (p.clone(), p)
            };
            let max = req
                .get("max_completion_tokens")
                .or_else(|| req.get("max_tokens"))
                .and_then(Value::as_u64)
                .map(|m| m as usize);
            let mut tokens: Vec<&str> = last.split_whitespace().collect();
            if tokens.is_empty() {
                tokens.push("Hello!");
            }
            let finish = match max {
                Some(m) if m < tokens.len() => {
                    tokens.truncate(m);
                    "length"
                }
                _ => "stop",
            };
            let answer = tokens.join(" ");
            let prompt_tokens = words(&prompt_text);
            let completion_tokens = tokens.len();
            let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
            let finish_reason = if finish == "length" {
                Finish::Length
            } else {
                Finish::Stop
            };
            // From here the request is the engine's: one that goes away, even while it
            // waits for a slot, is aborted.
            let mut course = Course::new(in_flight.0.clone(), incarnation, arrival, prompt_tokens);
            let Some(running) = in_flight.0.admit().await else {
                return openai_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    "the simulator is shutting down",
                );
            };
            let id = format!(
                "{}-{}",
                if chat { "chatcmpl" } else { "cmpl" },
                uuid::Uuid::new_v4().simple()
            );
            let object = if chat {
                "chat.completion"
            } else {
                "text_completion"
            };
            if req.get("stream").and_then(Value::as_bool) != Some(true) {
                let choice = if chat {
                    json!({"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish, "logprobs": null})
                } else {
                    json!({"index": 0, "text": answer, "finish_reason": finish, "logprobs": null})
                };
                let mut due = Instant::now() + sim.ttft;
                for _ in 0..completion_tokens {
                    until(due).await;
                    due = course.token() + sim.itl;
                }
                if completion_tokens == 0 {
                    until(due).await;
                }
                course.finish(finish_reason);
                drop(running);
                return json_resp(
                    StatusCode::OK,
                    &json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice], "usage": usage}),
                );
            }
            // Server-sent events: a role chunk (chat), one chunk per token, the finish
            // chunk, optional usage, then [DONE].
            let object = if chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let chunk = |choice: Value| json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            let mut events: Vec<Value> = Vec::new();
            if chat {
                events.push(chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})));
            }
            for (i, t) in tokens.iter().enumerate() {
                let piece = if i == 0 {
                    t.to_string()
                } else {
                    format!(" {t}")
                };
                events.push(chunk(if chat {
                    json!({"index": 0, "delta": {"content": piece}, "finish_reason": null})
                } else {
                    json!({"index": 0, "text": piece, "finish_reason": null, "logprobs": null})
                }));
            }
            events.push(chunk(if chat {
                json!({"index": 0, "delta": {}, "finish_reason": finish})
            } else {
                json!({"index": 0, "text": "", "finish_reason": finish, "logprobs": null})
            }));
            if req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true)
            {
                events.push(json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage}));
            }
            // Each token's chunk is sent when it is produced; the finish chunk follows the
            // last token. The request stays running (and in flight) until the stream ends
            // or the client goes away.
            let first = usize::from(chat);
            let mut frames: Vec<(Bytes, Beat)> = events
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let beat = match i {
                        i if i >= first && i < first + completion_tokens => Beat::Token,
                        i if i == first + completion_tokens => Beat::Finish,
                        _ => Beat::Frame,
                    };
                    (Bytes::from(format!("data: {e}\n\n")), beat)
                })
                .collect();
            frames.push((Bytes::from_static(b"data: [DONE]\n\n"), Beat::Frame));
            let streamed = Streamed {
                frames: frames.into_iter(),
                due: Instant::now() + sim.ttft,
                itl: sim.itl,
                course,
                finish: finish_reason,
                _running: running,
                _in_flight: in_flight,
            };
            let stream = futures::stream::unfold(streamed, |mut a| async move {
                let (frame, beat) = a.frames.next()?;
                match beat {
                    Beat::Token => {
                        until(a.due).await;
                        a.due = a.course.token() + a.itl;
                    }
                    Beat::Finish => {
                        if a.course.generated == 0 {
                            until(a.due).await;
                        }
                        a.course.finish(a.finish);
                    }
                    Beat::Frame => {}
                }
                Some((Ok::<_, Infallible>(frame), a))
            });
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(Body::from_stream(stream))
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"))
        }
        _ => openai_error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!("{method} {path} is not served by the simulator"),
        ),
    }
}

/// What a frame of a streamed answer is.
enum Beat {
    /// A token's chunk, sent when the token is produced.
    Token,
    /// The finish chunk, after the last token: the request is done.
    Finish,
    /// Anything else (the role chunk, usage, `[DONE]`), sent at once.
    Frame,
}

/// A streamed answer's state: its frames, when the next token is due, and what it holds
/// (fields drop in order: the course records an abort before the slot is freed).
struct Streamed {
    frames: std::vec::IntoIter<(Bytes, Beat)>,
    due: Instant,
    itl: Duration,
    course: Course,
    finish: Finish,
    _running: Running,
    _in_flight: InFlight,
}

#[cfg(test)]
mod tests {
    use super::super::Plane;
    use super::*;
    use crate::store::Store;

    #[test]
    fn sim_pods_are_recognised_with_their_model() {
        let pod = json!({"metadata": {"labels": {"modelplane.io/engine": "sim"}},
                         "spec": {"containers": [{"image": "x", "args": ["--model", "qwen-small", "--port", "8000"]}]}});
        let cfg = sim_config(&pod).unwrap();
        assert_eq!(cfg.model, "qwen-small");
        assert_eq!(
            (cfg.ttft, cfg.itl, cfg.max_num_seqs),
            (Duration::ZERO, Duration::ZERO, 5)
        );
        let other = json!({"spec": {"containers": [{"image": "vllm/vllm-openai:v0.9", "args": ["--model", "m"]}]}});
        assert!(sim_config(&other).is_none());
        let slow = json!({"spec": {"containers": [{"image": "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1",
            "args": ["--model=m", "--time-to-first-token", "250", "--inter-token-latency=1.5s", "--max-num-seqs", "2"]}]}});
        let cfg = sim_config(&slow).unwrap();
        assert_eq!(cfg.model, "m");
        assert_eq!(cfg.ttft, Duration::from_millis(250));
        assert_eq!(cfg.itl, Duration::from_millis(1500));
        assert_eq!(cfg.max_num_seqs, 2);
    }

    #[test]
    fn sim_durations_are_go_durations_or_milliseconds() {
        assert_eq!(sim_duration("100"), Some(Duration::from_millis(100)));
        assert_eq!(sim_duration("100ms"), Some(Duration::from_millis(100)));
        assert_eq!(sim_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(sim_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(sim_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(sim_duration("2x"), None);
        assert_eq!(sim_duration(""), None);
    }

    /// A sim pod `p` (uid `uid`) whose container has restarted `restarts` times.
    fn sim_pod(uid: &str, restarts: i64) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": uid,
                            "labels": {"modelplane.io/engine": "sim"}},
               "spec": {"containers": [{"name": "server", "image": "x",
                                        "args": ["--model", "m", "--time-to-first-token", "50ms"]}]},
               "status": {"containerStatuses": [{"name": "server", "restartCount": restarts}]}})
    }

    async fn body_text(r: Response) -> String {
        let b = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// The value of the series written exactly `series` (name and labels).
    fn sample(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    async fn scrape(plane: &Plane, pod: &Value) -> String {
        body_text(
            plane
                .answer_for_pod(pod.clone(), &Method::GET, "/metrics", &Bytes::new())
                .await,
        )
        .await
    }

    async fn complete(plane: &Plane, pod: &Value, path: &str, body: Value) -> Response {
        let body = Bytes::from(body.to_string());
        plane
            .answer_for_pod(pod.clone(), &Method::POST, path, &body)
            .await
    }

    const M: &str = "{model_name=\"m\"}";

    async fn get(plane: &Plane, pod: &Value, path: &str) -> Value {
        let r = plane
            .answer_for_pod(pod.clone(), &Method::GET, path, &Bytes::new())
            .await;
        serde_json::from_str(&body_text(r).await).unwrap()
    }

    fn ids(models: &Value) -> Vec<(String, Value)> {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["id"].as_str().unwrap().to_owned(), m["parent"].clone()))
            .collect()
    }

    // llm-d-inference-sim pkg/llm-d-inference-sim/lora.go and simulator.go: load and
    // unload answer 200 with an empty body (unload of an unknown adapter too), a body that
    // does not parse 400 in plain text; `/v1/models` lists the base model, then each adapter
    // with the first served name as parent; `--lora-modules` are there from the start and
    // again after a restart, loaded ones are gone with the process.
    #[tokio::test]
    async fn sim_pods_load_and_unload_lora_adapters_at_run_time() {
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let mut pod = sim_pod("u-lora", 0);
        pod["spec"]["containers"][0]["args"] = json!([
            "--model",
            "m",
            "--lora-modules",
            r#"{"name":"boot","path":"/l/boot","base_model_name":"m"}"#,
            "--port",
            "8000"
        ]);
        assert_eq!(
            ids(&get(&plane, &pod, "/v1/models").await),
            vec![
                ("m".to_owned(), Value::Null),
                ("boot".to_owned(), json!("m"))
            ]
        );
        let r = complete(
            &plane,
            &pod,
            "/v1/load_lora_adapter",
            json!({"lora_name": "sql", "lora_path": "acme/sql"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body_text(r).await, "");
        let answer = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "sql", "prompt": "a b", "max_tokens": 1}),
        )
        .await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(
            serde_json::from_str::<Value>(&body_text(answer).await).unwrap()["model"],
            "sql"
        );
        let r = complete(
            &plane,
            &pod,
            "/v1/unload_lora_adapter",
            json!({"lora_name": "sql"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let r = complete(
            &plane,
            &pod,
            "/v1/unload_lora_adapter",
            json!({"lora_name": "never"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let gone = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "sql", "prompt": "a", "max_tokens": 1}),
        )
        .await;
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
        let body: Value = serde_json::from_str(&body_text(gone).await).unwrap();
        assert_eq!(body["error"]["message"], "The model `sql` does not exist.");
        let bad = plane
            .answer_for_pod(
                pod.clone(),
                &Method::POST,
                "/v1/load_lora_adapter",
                &Bytes::from_static(b"{"),
            )
            .await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert!(
            body_text(bad)
                .await
                .starts_with("failed to read and parse load lora request body, ")
        );
        // Loaded again, then the container restarts: only `--lora-modules` remain.
        complete(
            &plane,
            &pod,
            "/v1/load_lora_adapter",
            json!({"lora_name": "sql", "lora_path": "acme/sql"}),
        )
        .await;
        pod["status"]["containerStatuses"][0]["restartCount"] = json!(1);
        assert_eq!(
            ids(&get(&plane, &pod, "/v1/models").await),
            vec![
                ("m".to_owned(), Value::Null),
                ("boot".to_owned(), json!("m"))
            ]
        );
    }

    // vLLM's counters belong to the process: "generally reset to zero when the vLLM
    // instance restarts" (docs/design/metrics.md, Metrics Publishing - Prometheus). A
    // container restart is seen as a higher restartCount of the pod's sim container.
    #[tokio::test]
    async fn a_restarted_sim_container_starts_its_figures_from_zero() {
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let before = sim_pod("u1", 0);
        let r = complete(
            &plane,
            &before,
            "/v1/completions",
            json!({"model": "m", "prompt": "one two three", "max_tokens": 2}),
        )
        .await;
        let usage = serde_json::from_str::<Value>(&body_text(r).await).unwrap()["usage"].clone();
        assert_eq!(
            usage,
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
        );
        let r = complete(
            &plane,
            &before,
            "/v1/chat/completions",
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "a b"}]}),
        )
        .await;
        assert!(body_text(r).await.ends_with("data: [DONE]\n\n"));
        let m = scrape(&plane, &before).await;
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 5.0);
        assert_eq!(sample(&m, &format!("vllm:generation_tokens_total{M}")), 4.0);
        let success = |m: &str, why: &str| {
            sample(
                m,
                &format!(
                    "vllm:request_success_total{{model_name=\"m\",finished_reason=\"{why}\"}}"
                ),
            )
        };
        assert_eq!(
            (
                success(&m, "stop"),
                success(&m, "length"),
                success(&m, "abort")
            ),
            (1.0, 1.0, 0.0)
        );
        assert_eq!(
            sample(&m, &format!("vllm:time_to_first_token_seconds_count{M}")),
            2.0
        );
        assert!(sample(&m, &format!("vllm:time_to_first_token_seconds_sum{M}")) >= 0.1);
        assert_eq!(
            sample(&m, &format!("vllm:inter_token_latency_seconds_count{M}")),
            2.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:e2e_request_latency_seconds_count{M}")),
            2.0
        );

        // A request the old process took is still waiting for its first token when the
        // container restarts: the new process's figures start from zero and never see it.
        let old = complete(
            &plane,
            &before,
            "/v1/completions",
            json!({"model": "m", "prompt": "x y"}),
        );
        tokio::pin!(old);
        assert!(futures::poll!(&mut old).is_pending());
        let after = sim_pod("u1", 1);
        let zero = |m: &str| {
            assert_eq!(
                sample(m, &format!("vllm:prompt_tokens_total{M}")),
                0.0,
                "{m}"
            );
            assert_eq!(
                sample(m, &format!("vllm:generation_tokens_total{M}")),
                0.0,
                "{m}"
            );
            for why in ["stop", "length", "abort"] {
                assert_eq!(success(m, why), 0.0, "{m}");
            }
            for h in [
                "time_to_first_token_seconds",
                "inter_token_latency_seconds",
                "time_per_output_token_seconds",
                "e2e_request_latency_seconds",
            ] {
                assert_eq!(sample(m, &format!("vllm:{h}_count{M}")), 0.0, "{m}");
                assert_eq!(sample(m, &format!("vllm:{h}_sum{M}")), 0.0, "{m}");
            }
        };
        zero(&scrape(&plane, &after).await);
        assert_eq!(old.await.status(), StatusCode::OK);
        zero(&scrape(&plane, &after).await);
        // An older view of the pod does not bring the old figures back.
        zero(&scrape(&plane, &before).await);

        // The new process counts its own requests.
        complete(
            &plane,
            &after,
            "/v1/completions",
            json!({"model": "m", "prompt": "x y"}),
        )
        .await;
        let m = scrape(&plane, &after).await;
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 2.0);
        assert_eq!(success(&m, "stop"), 1.0);
    }

    // A client that goes away mid-stream (hyper drops the body) aborts the request: it
    // counts as finished_reason="abort" with the tokens produced so far, and its slot
    // is free again.
    #[tokio::test]
    async fn a_dropped_stream_is_an_aborted_request() {
        use futures::StreamExt;
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let pod = sim_pod("u1", 0);
        let r = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "m", "stream": true, "prompt": "a b c d e f"}),
        )
        .await;
        let mut frames = r.into_body().into_data_stream();
        let first = frames.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("\"text\":\"a\""));
        let m = scrape(&plane, &pod).await;
        assert_eq!(sample(&m, &format!("vllm:num_requests_running{M}")), 1.0);
        drop(frames);
        let m = scrape(&plane, &pod).await;
        assert_eq!(sample(&m, &format!("vllm:num_requests_running{M}")), 0.0);
        assert_eq!(
            sample(
                &m,
                "vllm:request_success_total{model_name=\"m\",finished_reason=\"abort\"}"
            ),
            1.0
        );
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 6.0);
        assert_eq!(sample(&m, &format!("vllm:generation_tokens_total{M}")), 1.0);
        assert_eq!(
            sample(&m, &format!("vllm:time_to_first_token_seconds_count{M}")),
            1.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:inter_token_latency_seconds_count{M}")),
            0.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:e2e_request_latency_seconds_count{M}")),
            1.0
        );
    }

    // The text exposition format 0.0.4: label values escape backslash, double quote and
    // line feed; a histogram's buckets are cumulative and end with le="+Inf" = _count.
    #[test]
    fn histograms_and_labels_follow_the_text_format() {
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut h = Histogram::new(ITL_BUCKETS);
        for ms in [5, 10, 30, 30, 100_000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        histogram(&mut out, "x", "Help.", "model_name=\"m\"", &h);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "# HELP x Help.");
        assert_eq!(lines[1], "# TYPE x histogram");
        assert_eq!(lines[2], "x_bucket{model_name=\"m\",le=\"0.01\"} 2");
        assert_eq!(lines[3], "x_bucket{model_name=\"m\",le=\"0.025\"} 2");
        assert_eq!(lines[4], "x_bucket{model_name=\"m\",le=\"0.05\"} 4");
        assert_eq!(lines[20], "x_bucket{model_name=\"m\",le=\"80\"} 4");
        assert_eq!(lines[21], "x_bucket{model_name=\"m\",le=\"+Inf\"} 5");
        let sum: f64 = 0.005 + 0.01 + 0.03 + 0.03 + 100.0;
        assert_eq!(lines[22], format!("x_sum{{model_name=\"m\"}} {sum}"));
        assert_eq!(lines[23], "x_count{model_name=\"m\"} 5");
    }
}

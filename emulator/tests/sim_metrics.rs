//! A sim pod's serving metrics, read through the pod proxy as modelplane's worker reads
//! a model server's `/metrics`: the counters and histograms a vLLM server exports,
//! measured from the requests the pod really answered.
//!
//! Sources: vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py in
//! github.com/vllm-project/vllm: `vllm:prompt_tokens_total`,
//! `vllm:generation_tokens_total`, `vllm:request_success_total` by `finished_reason`,
//! the histograms and their bucket boundaries) and docs/design/metrics.md (the time to
//! first token and the end-to-end latency are measured from the request's arrival, the
//! inter-token latency between successive tokens); llm-d-inference-sim, the simulator
//! the emulator imitates (pkg/llm-d-inference-sim/metrics.go and docs/metrics.md in
//! github.com/llm-d/llm-d-inference-sim: the same names and buckets, with
//! `vllm:time_per_output_token_seconds` observed alongside
//! `vllm:inter_token_latency_seconds`; its latency flags in pkg/common/config.go); the
//! Prometheus text exposition format 0.0.4 (content/docs/instrumenting/
//! exposition_formats.md in github.com/prometheus/docs).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(30);
const SIM: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1";
const MODEL: &str = "qwen-small";

async fn start() -> (RunningEmulator, Client) {
    let emu = Emulator::builder()
        .nodes(1)
        .start_delay(Duration::from_millis(100))
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    (emu, client)
}

/// A running sim pod `name` (as modelplane labels the sim engine) started with `flags`.
async fn sim_pod(client: &Client, name: &str, flags: &[&str]) {
    let mut args = vec!["--model", MODEL, "--port", "8000"];
    args.extend_from_slice(flags);
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name, "modelplane.io/engine": "sim"}},
        "spec": {"containers": [{"name": "server", "image": SIM, "args": args,
                                 "ports": [{"name": "http", "containerPort": 8000}]}]}});
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let p = pods.get(name).await.unwrap();
        let running = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            });
        if running {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for pod {name} to run: {:?}",
            p.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn proxy(pod: &str, path: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{pod}:8000/proxy{path}")
}

/// The request line and headers of an HTTP/1.1 request on its own connection.
fn request(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One request to the API server, one connection; the status and the (de-chunked) body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    s.write_all(request(method, path, &body).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    if !chunked {
        return (status, rest.to_string());
    }
    let (mut out, mut rest) = (String::new(), rest);
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return (status, out);
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
}

/// What an answer says of itself: its usage (prompt and completion tokens), finish
/// reason, and the token chunks a streamed answer carried.
#[derive(Debug, PartialEq)]
struct Answered {
    prompt_tokens: u64,
    completion_tokens: u64,
    finish: String,
}

fn answered(streamed: bool, body: &str) -> Answered {
    let (usage, finish) = if streamed {
        let events: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let usage = events
            .iter()
            .find_map(|e| e.get("usage").cloned())
            .unwrap_or_else(|| panic!("no usage in {body}"));
        let finish = events
            .iter()
            .find_map(|e| e.pointer("/choices/0/finish_reason")?.as_str())
            .unwrap();
        (usage, finish.to_string())
    } else {
        let v: Value = serde_json::from_str(body).unwrap();
        let finish = v["choices"][0]["finish_reason"].as_str().unwrap();
        (v["usage"].clone(), finish.to_string())
    };
    Answered {
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap(),
        completion_tokens: usage["completion_tokens"].as_u64().unwrap(),
        finish,
    }
}

/// One sample of an exposition: its metric name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A `/metrics` answer, checked against the text exposition format 0.0.4: every line is
/// a `# HELP`, a `# TYPE` or a sample `name{label="value",...} value`; each family has
/// one HELP and one TYPE line, before its samples, which are contiguous; label values
/// are quoted with `\\`, `\"` and `\n` escaped; a histogram's samples are its
/// `_bucket` series (with `le`), `_sum` and `_count`.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

fn parse_labels(s: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return (labels, after);
        }
        let (name, after) = rest.split_once("=\"").expect("label=\"value\"");
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "label name {name:?}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("a closed label value") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().unwrap().1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => panic!("invalid escape \\{c}"),
                },
                (_, c) => value.push(c),
            }
        };
        assert!(
            labels.insert(name.to_string(), value).is_none(),
            "{name} twice"
        );
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn parse(text: &str) -> Exposition {
    assert!(text.ends_with('\n'), "{text}");
    let mut helps = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    // The family of the last TYPE line: samples follow their family's TYPE, and as each
    // family has one, its samples are contiguous.
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            assert!(
                helps.insert(name.to_string(), help.to_string()).is_none(),
                "HELP {name} twice"
            );
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram"].contains(&ty),
                "TYPE {name} {ty}"
            );
            assert!(helps.contains_key(name), "TYPE {name} without HELP");
            assert!(
                types.insert(name.to_string(), ty.to_string()).is_none(),
                "TYPE {name} twice"
            );
            current = Some(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "metric name {name:?}"
        );
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(rest) => parse_labels(rest),
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let value = rest.strip_prefix(' ').expect("a space before the value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        let fam = current.as_deref().expect("a sample after its TYPE");
        let ok = match types[fam].as_str() {
            "histogram" => {
                (name == format!("{fam}_bucket") && labels.contains_key("le"))
                    || name == format!("{fam}_sum")
                    || name == format!("{fam}_count")
            }
            _ => name == fam,
        };
        assert!(ok, "{line} is not a sample of family {fam}");
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Exposition { types, samples }
}

impl Exposition {
    /// The value of the sample `name` whose labels are exactly `model_name` and `extra`.
    fn value(&self, name: &str, extra: &[(&str, &str)]) -> f64 {
        let mut want: BTreeMap<String, String> = [("model_name".to_string(), MODEL.to_string())]
            .into_iter()
            .collect();
        want.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(found.len(), 1, "{name} {want:?}: {found:?}");
        found[0].value
    }

    fn finished(&self, why: &str) -> f64 {
        self.value("vllm:request_success_total", &[("finished_reason", why)])
    }

    /// A histogram's buckets `(le, cumulative count)`, checked: the bounds are
    /// `bounds` then `+Inf`, the counts never decrease and the `+Inf` one is `_count`.
    fn buckets(&self, family: &str, bounds: &[f64]) -> Vec<(f64, f64)> {
        assert_eq!(self.types[family], "histogram");
        let buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
            .map(|s| {
                assert_eq!(s.labels["model_name"], MODEL);
                (s.labels["le"].parse().unwrap(), s.value)
            })
            .collect();
        let les: Vec<f64> = buckets.iter().map(|b| b.0).collect();
        let mut want = bounds.to_vec();
        want.push(f64::INFINITY);
        assert_eq!(les, want, "{family} bucket boundaries");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{family} buckets are cumulative: {buckets:?}"
        );
        assert_eq!(
            buckets.last().unwrap().1,
            self.value(&format!("{family}_count"), &[]),
            "{family}: le=\"+Inf\" is the count"
        );
        buckets
    }

    /// The cumulative count of the bucket `le`.
    fn bucket(&self, family: &str, bounds: &[f64], le: f64) -> f64 {
        self.buckets(family, bounds)
            .into_iter()
            .find(|b| b.0 == le)
            .unwrap()
            .1
    }
}

async fn scrape(addr: SocketAddr, pod: &str) -> Exposition {
    let (status, body) = http(addr, "GET", &proxy(pod, "/metrics"), None).await;
    assert_eq!(status, 200, "{body}");
    parse(&body)
}

// vLLM's bucket boundaries (loggers.py; vllm/v1/metrics/buckets.py in later releases),
// which llm-d-inference-sim copies in pkg/common/utils.go.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

const TTFT: &str = "vllm:time_to_first_token_seconds";
const ITL: &str = "vllm:inter_token_latency_seconds";
const TPOT: &str = "vllm:time_per_output_token_seconds";
const E2E: &str = "vllm:e2e_request_latency_seconds";

/// The sum and count of a histogram.
fn sum_count(m: &Exposition, family: &str) -> (f64, f64) {
    (
        m.value(&format!("{family}_sum"), &[]),
        m.value(&format!("{family}_count"), &[]),
    )
}

// The counters count exactly what the pod answered: prompt tokens as the answers'
// `usage.prompt_tokens` (the words of the prompt), generation tokens as their
// completion tokens, and each finished request by its finish reason; the latency
// histograms observe each request's real times (vLLM measures the time to first token
// and the end-to-end latency from the request's arrival, so the wait for one of the
// `--max-num-seqs` slots is in them).
#[tokio::test]
async fn sim_metrics_count_what_the_pod_answered() {
    let (emu, client) = start().await;
    let (ttft, itl) = (0.1, 0.02);
    sim_pod(
        &client,
        "counted",
        &[
            "--time-to-first-token",
            "100ms",
            "--inter-token-latency",
            "20ms",
            "--max-num-seqs",
            "2",
        ],
    )
    .await;
    let addr = emu.addr();

    // Before any request: every series is there, at zero.
    let m = scrape(addr, "counted").await;
    for (name, ty) in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:request_success_total", "counter"),
        (TTFT, "histogram"),
        (ITL, "histogram"),
        (TPOT, "histogram"),
        (E2E, "histogram"),
    ] {
        assert_eq!(m.types[name], ty, "{name}");
    }
    assert_eq!(m.value("vllm:prompt_tokens_total", &[]), 0.0);
    assert_eq!(m.value("vllm:generation_tokens_total", &[]), 0.0);
    for why in ["stop", "length", "abort"] {
        assert_eq!(m.finished(why), 0.0, "{why}");
    }
    for (family, bounds) in [
        (TTFT, TTFT_BUCKETS),
        (ITL, ITL_BUCKETS),
        (TPOT, ITL_BUCKETS),
        (E2E, E2E_BUCKETS),
    ] {
        assert!(m.buckets(family, bounds).iter().all(|b| b.1 == 0.0));
        assert_eq!(sum_count(&m, family), (0.0, 0.0));
    }

    // Seven requests at once to a pod that runs two at a time, each with what its answer
    // must say: the prompt's words, the tokens of the answer (the echoed last user
    // message, cut at max_tokens) and why it ended.
    let chat = |content: &str| {
        json!({"model": MODEL, "messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": content}]})
    };
    let mut requests: Vec<(&str, Value, Answered)> = Vec::new();
    for _ in 0..3 {
        let want = Answered {
            prompt_tokens: 6,
            completion_tokens: 4,
            finish: "stop".into(),
        };
        requests.push(("/v1/chat/completions", chat("alpha beta gamma delta"), want));
    }
    for _ in 0..2 {
        let body =
            json!({"model": MODEL, "prompt": "one two three four five six", "max_tokens": 2});
        let want = Answered {
            prompt_tokens: 6,
            completion_tokens: 2,
            finish: "length".into(),
        };
        requests.push(("/v1/completions", body, want));
    }
    let mut body = chat("red green blue");
    body["max_tokens"] = json!(10);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let want = Answered {
        prompt_tokens: 5,
        completion_tokens: 3,
        finish: "stop".into(),
    };
    requests.push(("/v1/chat/completions", body, want));
    let body = json!({"model": MODEL, "prompt": "a b c d e", "max_tokens": 4, "stream": true,
                      "stream_options": {"include_usage": true}});
    let want = Answered {
        prompt_tokens: 5,
        completion_tokens: 4,
        finish: "length".into(),
    };
    requests.push(("/v1/completions", body, want));

    let n = requests.len() as f64;
    let prompt_tokens: u64 = requests.iter().map(|r| r.2.prompt_tokens).sum();
    let generation_tokens: u64 = requests.iter().map(|r| r.2.completion_tokens).sum();
    let finished = |why: &str| requests.iter().filter(|r| r.2.finish == why).count() as f64;
    // The least each request can take: the time to first token, and the inter-token
    // latency before each further token.
    let gaps = (generation_tokens as f64) - n;
    let least_e2e = n * ttft + gaps * itl;

    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = requests
        .iter()
        .map(|(path, body, _)| {
            let (path, body) = (proxy("counted", path), body.clone());
            tokio::spawn(async move { http(addr, "POST", &path, Some(body)).await })
        })
        .collect();
    for ((_, body, want), task) in requests.iter().zip(tasks) {
        let (status, answer) = task.await.unwrap();
        assert_eq!(status, 200, "{answer}");
        let streamed = body["stream"] == json!(true);
        assert_eq!(&answered(streamed, &answer), want, "{answer}");
    }
    // No request took longer than all of them together.
    let wall = started.elapsed().as_secs_f64();

    let m = scrape(addr, "counted").await;
    assert_eq!(
        m.value("vllm:prompt_tokens_total", &[]),
        prompt_tokens as f64
    );
    assert_eq!(
        m.value("vllm:generation_tokens_total", &[]),
        generation_tokens as f64
    );
    assert_eq!((prompt_tokens, generation_tokens), (40, 23));
    for why in ["stop", "length", "abort"] {
        assert_eq!(m.finished(why), finished(why), "{why}");
    }
    assert_eq!((finished("stop"), finished("length")), (4.0, 3.0));
    assert_eq!(m.value("vllm:num_requests_running", &[]), 0.0);
    assert_eq!(m.value("vllm:num_requests_waiting", &[]), 0.0);

    // One time to first token and one end-to-end latency per request, one inter-token
    // latency per token after a request's first.
    let (ttft_sum, ttft_count) = sum_count(&m, TTFT);
    let (itl_sum, itl_count) = sum_count(&m, ITL);
    let (e2e_sum, e2e_count) = sum_count(&m, E2E);
    assert_eq!((ttft_count, e2e_count), (n, n));
    assert_eq!(itl_count, gaps);
    assert_eq!(sum_count(&m, TPOT), (itl_sum, itl_count));
    assert_eq!(m.buckets(TPOT, ITL_BUCKETS), m.buckets(ITL, ITL_BUCKETS));
    // Each request waited at least the configured times; none took longer than the whole
    // batch (on a loaded machine that is the only honest upper bound).
    assert!(
        ttft_sum >= n * ttft && ttft_sum <= n * wall,
        "TTFT sum {ttft_sum} for {n} requests of at least {ttft} s within {wall} s"
    );
    assert!(
        itl_sum >= gaps * itl && itl_sum <= n * wall,
        "ITL sum {itl_sum} for {gaps} gaps of at least {itl} s within {wall} s"
    );
    assert!(
        e2e_sum >= least_e2e && e2e_sum <= n * wall,
        "e2e sum {e2e_sum}: at least {least_e2e} s, at most {n} x {wall} s"
    );
    // A request's end-to-end latency holds its time to first token and its gaps.
    assert!(
        e2e_sum + 1e-9 >= ttft_sum + itl_sum,
        "{e2e_sum} {ttft_sum} {itl_sum}"
    );
    // No time to first token was under 0.1 s, no gap under 0.02 s.
    assert_eq!(m.bucket(TTFT, TTFT_BUCKETS, 0.08), 0.0);
    assert_eq!(m.bucket(ITL, ITL_BUCKETS, 0.01), 0.0);
    emu.shutdown().await;
}

// A client that goes away before the end of a streamed answer aborts the request (vLLM's
// FinishReason.ABORT, "aborted by client"): it counts as finished_reason="abort", with
// its prompt and the tokens produced before the pod saw the connection close, and its
// slot is freed for the next request.
#[tokio::test]
async fn a_stream_the_client_leaves_is_counted_as_aborted() {
    let (emu, client) = start().await;
    sim_pod(
        &client,
        "left",
        &[
            "--time-to-first-token",
            "50ms",
            "--inter-token-latency",
            "50ms",
            "--max-num-seqs",
            "1",
        ],
    )
    .await;
    let addr = emu.addr();

    // A 40-token answer; the client reads its first token and goes away.
    let words: Vec<String> = (1..=40).map(|i| format!("w{i}")).collect();
    let body = json!({"model": MODEL, "stream": true,
                      "messages": [{"role": "user", "content": words.join(" ")}]});
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let path = proxy("left", "/v1/chat/completions");
    s.write_all(request("POST", &path, &body.to_string()).as_bytes())
        .await
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("\"content\":\"w1\"") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let tokens_seen = seen.matches("\"content\":\"").count() as f64 - 1.0; // the role chunk's ""
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    drop(s);

    // The next request waits for the only slot, which the aborted one frees.
    let next = json!({"model": MODEL, "prompt": "x y z", "max_tokens": 2});
    let (status, answer) = http(addr, "POST", &proxy("left", "/v1/completions"), Some(next)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answered(false, &answer),
        Answered {
            prompt_tokens: 3,
            completion_tokens: 2,
            finish: "length".into()
        }
    );

    let m = scrape(addr, "left").await;
    assert_eq!(m.finished("abort"), 1.0);
    assert_eq!(m.finished("length"), 1.0);
    assert_eq!(m.finished("stop"), 0.0);
    // Both prompts were processed (the aborted one had produced a token).
    assert_eq!(m.value("vllm:prompt_tokens_total", &[]), 40.0 + 3.0);
    // The aborted request produced at least the tokens its client saw, and not all 40.
    let generated = m.value("vllm:generation_tokens_total", &[]) - 2.0;
    assert!(
        generated >= tokens_seen && generated < 40.0,
        "{generated} tokens of the aborted request, {tokens_seen} seen"
    );
    let (ttft_sum, ttft_count) = sum_count(&m, TTFT);
    let (_, itl_count) = sum_count(&m, ITL);
    let (e2e_sum, e2e_count) = sum_count(&m, E2E);
    assert_eq!((ttft_count, e2e_count), (2.0, 2.0));
    // A gap after each token but the first of each request.
    assert_eq!(itl_count, (generated - 1.0) + (2.0 - 1.0));
    assert!(ttft_sum >= 2.0 * 0.05, "{ttft_sum}");
    // The aborted request ran to its first token at least; the next one to its second.
    assert!(e2e_sum >= 0.05 + 0.1, "{e2e_sum}");
    m.buckets(TTFT, TTFT_BUCKETS);
    m.buckets(E2E, E2E_BUCKETS);
    assert_eq!(m.value("vllm:num_requests_running", &[]), 0.0);
    assert_eq!(m.value("vllm:num_requests_waiting", &[]), 0.0);
    emu.shutdown().await;
}

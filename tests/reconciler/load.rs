//! Serving metrics: known load sent through the Gateway at `sim` pods, and what modelplane
//! reports of it (`status.load`, the series, the change feed), plus the pages a collector
//! must survive (unreachable, garbage, too large).
//!
//! The sim pods serve vLLM's series as llm-d-inference-sim does (see the emulator's
//! `dataplane/sim.rs`), from the requests they really answered: what the test counts on the
//! client side is what the pods count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

/// One GPU node, quick kubelets and a Gateway (also the PromQL tests' cluster).
pub(super) fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(1)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(100))
        .gateway("gateway-system", "inference")
}

/// What the clients sent and got back.
#[derive(Default)]
pub(super) struct Sent {
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    /// Microseconds the requests spent from sending to the whole answer, summed.
    in_flight_micros: AtomicU64,
}

/// `clients` closed-loop clients sending completions at `url` until `stop`.
pub(super) fn drive(
    url: String,
    model: String,
    clients: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<Sent>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (url, model, stop, sent) = (url.clone(), model.clone(), stop.clone(), sent.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while !stop.load(Ordering::SeqCst) {
                    let sent_at = Instant::now();
                    let response = client
                        .post(&url)
                        .json(&json!({"model": model, "prompt": "one two three four five six seven eight", "max_tokens": 3}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), StatusCode::OK);
                    let body: Value = response.json().await.unwrap();
                    sent.in_flight_micros.fetch_add(sent_at.elapsed().as_micros() as u64, Ordering::SeqCst);
                    sent.requests.fetch_add(1, Ordering::SeqCst);
                    sent.prompt_tokens.fetch_add(body["usage"]["prompt_tokens"].as_u64().unwrap(), Ordering::SeqCst);
                    sent.completion_tokens.fetch_add(body["usage"]["completion_tokens"].as_u64().unwrap(), Ordering::SeqCst);
                }
            })
        })
        .collect()
}

fn within(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= want.abs() * tolerance,
        "{what}: reported {got}, sent {want} (more than {}% apart)",
        tolerance * 100.0
    );
}

/// The deployment's OpenAI base URL (through the Gateway) and the model id it serves.
pub(super) async fn openai(record: &Value) -> (String, String) {
    let base = record["status"]["endpoints"]["openaiBase"]
        .as_str()
        .unwrap()
        .to_owned();
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let model = models["data"][0]["id"].as_str().unwrap().to_owned();
    (base, model)
}

pub(super) async fn ready(h: &Harness, name: &str) -> Value {
    wait_for(
        &format!("{name} to be Ready"),
        Duration::from_secs(60),
        || async { h.deployment(name).await["status"]["phase"] == "Ready" },
    )
    .await;
    h.deployment(name).await
}

/// Steady load through the Gateway: 6 clients on a pod with 4 slots (`--max-num-seqs 4`),
/// each answer 100 ms to the first token and 10 ms per further token. The reported
/// requests/s, tokens/s, running and waiting (averaged over the readings of the steady
/// part) are within 10% of what the clients counted; the time to first token is where
/// Prometheus' histogram_quantile puts it for vLLM's buckets (every request's first token
/// came between 0.1 s and 0.25 s: one bucket, so the median interpolates to 0.175 s,
/// prometheus/prometheus promql/quantile.go bucketQuantile).
#[sqlx::test]
async fn the_load_sent_through_the_gateway_is_what_status_load_reports(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.collect_load();
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["args"] = json!([
        "--max-num-seqs=4",
        "--time-to-first-token=100ms",
        "--inter-token-latency=10ms"
    ]);
    create_with(&h, "qwen", spec).await;
    let (base, model) = openai(&ready(&h, "qwen").await).await;

    // Before any request: a reading with zero requests, not a missing one.
    wait_for("a first reading", Duration::from_secs(20), || async {
        h.deployment("qwen").await["status"]["load"]["requestsPerSecond"] == json!(0.0)
    })
    .await;
    let idle = h.deployment("qwen").await["status"]["load"].clone();
    assert_eq!(idle["stale"], false, "{idle}");
    assert_eq!(idle["dialect"], "vllm");
    assert_eq!(
        (idle["pods"].clone(), idle["podsRead"].clone()),
        (json!(1), json!(1))
    );
    assert!(
        idle.get("ttftP50Seconds").is_none_or(Value::is_null),
        "nothing finished, no latency: {idle}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Sent::default());
    let clients = drive(
        format!("{base}/completions"),
        model,
        6,
        stop.clone(),
        sent.clone(),
    );
    // Warm up, then take the readings of the steady part.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    let before = (
        sent.requests.load(Ordering::SeqCst),
        sent.prompt_tokens.load(Ordering::SeqCst),
        sent.completion_tokens.load(Ordering::SeqCst),
        sent.in_flight_micros.load(Ordering::SeqCst),
    );
    let mut readings: Vec<Value> = Vec::new();
    let mut last_as_of = String::new();
    while readings.len() < 6 {
        let load = h.deployment("qwen").await["status"]["load"].clone();
        let as_of = load["asOf"].as_str().unwrap().to_owned();
        if as_of != last_as_of && load["requestsPerSecond"].as_f64().is_some_and(|r| r > 0.0) {
            last_as_of = as_of;
            readings.push(load);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = (
        sent.requests.load(Ordering::SeqCst),
        sent.prompt_tokens.load(Ordering::SeqCst),
        sent.completion_tokens.load(Ordering::SeqCst),
        sent.in_flight_micros.load(Ordering::SeqCst),
    );
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let mean = |field: &str| {
        readings
            .iter()
            .map(|r| r[field].as_f64().unwrap())
            .sum::<f64>()
            / readings.len() as f64
    };
    let rps = (after.0 - before.0) as f64 / elapsed;
    within("requests/s", mean("requestsPerSecond"), rps, 0.10);
    within(
        "prompt tokens/s",
        mean("promptTokensPerSecond"),
        (after.1 - before.1) as f64 / elapsed,
        0.10,
    );
    within(
        "generation tokens/s",
        mean("generationTokensPerSecond"),
        (after.2 - before.2) as f64 / elapsed,
        0.10,
    );
    // The 4 slots are always busy; how many requests were in the pod on average is, by
    // Little's law, the time the clients' requests spent in flight over the time elapsed
    // (the requests' own trips through the Gateway are a few milliseconds of it).
    within("running", mean("running"), 4.0, 0.10);
    let in_system = (after.3 - before.3) as f64 / 1e6 / elapsed;
    within(
        "running + waiting",
        mean("running") + mean("waiting"),
        in_system,
        0.10,
    );
    within("KV-cache use", mean("kvCacheUsage"), 1.0, 0.10);
    within("TTFT p50", mean("ttftP50Seconds"), 0.175, 0.10);
    for r in &readings {
        let p95 = r["ttftP95Seconds"].as_f64().unwrap();
        assert!(
            (0.1..=0.5).contains(&p95),
            "TTFT p95 {p95} outside the buckets the first tokens came in"
        );
        assert_eq!(r["errorRate"], json!(0.0), "{r}");
        assert_eq!(r["stale"], false);
    }

    // The series holds the same readings.
    let metrics: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/metrics?window=5m&step=1s&series=requestsPerSecond,replicas")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(metrics["stepSeconds"], 1);
    assert_eq!(metrics["resolutionSeconds"], 1);
    assert_eq!(metrics["timestamps"].as_array().unwrap().len(), 300);
    let series = metrics["series"].as_array().unwrap();
    assert_eq!(series[0]["name"], "requestsPerSecond");
    assert_eq!(series[0]["unit"], "requests/s");
    let busy: Vec<f64> = series[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .filter(|v| *v > 0.0)
        .collect();
    assert!(busy.len() >= readings.len(), "{busy:?}");
    // Replicas: none until the pod was ready (a round may come before it is), then the
    // one pod from there on.
    let replicas: Vec<f64> = series[1]["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(
        replicas.iter().all(|r| *r == 0.0 || *r == 1.0)
            && replicas.is_sorted()
            && replicas.iter().filter(|r| **r == 1.0).count() >= readings.len(),
        "{replicas:?}"
    );

    // The project's sum is this deployment's.
    let project: Value = h
        .app
        .get("/api/v1/projects/team-a/metrics?window=5m&step=1s&series=requestsPerSecond")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(project["series"][0]["values"], series[0]["values"]);
}

/// A pod whose page cannot be read (here: the API server forbids `get` on `pods/proxy`,
/// as RBAC without that rule would) makes the reading stale with the reason, keeps the
/// last good figures rather than zeros shown as fresh, stores no sample, and recovers.
#[sqlx::test]
async fn an_unreadable_pod_makes_the_load_stale_with_the_reason(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.collect_load();
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    ready(&h, "qwen").await;
    wait_for(
        "a fresh reading with a rate",
        Duration::from_secs(20),
        || async { h.deployment("qwen").await["status"]["load"]["requestsPerSecond"].is_number() },
    )
    .await;
    let faults = h.emulator.as_ref().unwrap().faults();
    faults.forbid("get", "pods/proxy");
    wait_for("a stale reading", Duration::from_secs(20), || async {
        h.deployment("qwen").await["status"]["load"]["stale"] == true
    })
    .await;
    let load = h.deployment("qwen").await["status"]["load"].clone();
    let reason = load["reason"].as_str().unwrap();
    assert!(
        reason.contains("1 of 1 ready pods could not be read"),
        "{reason}"
    );
    assert!(reason.contains("HTTP 403"), "{reason}");
    assert_eq!(load["podsRead"], 0);
    assert!(
        load["requestsPerSecond"].is_number(),
        "the last good figures stay: {load}"
    );
    faults.allow("get", "pods/proxy");
    wait_for("a fresh reading again", Duration::from_secs(20), || async {
        h.deployment("qwen").await["status"]["load"]["stale"] == false
    })
    .await;
}

/// A page served by a local server on 127.0.0.1, read as a pod's page by pod IP.
async fn serve_page(router: axum::Router) -> (k8s_openapi::api::core::v1::Pod, i32) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port() as i32;
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (pod_at(port), port)
}

fn pod_at(port: i32) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"containers": [{"name": "server", "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"podIP": "127.0.0.1"}
    }))
    .unwrap()
}

/// The pages a collector meets in the wild: each gives a one-line error, none a panic or
/// a number.
#[tokio::test]
async fn unreachable_garbage_huge_and_slow_pages_are_errors_not_numbers() {
    use axum::routing::get;
    use modelplane::domain::MetricsDialect;
    use modelplane::reconciler::load::{ScrapeError, Via, read, scrape};
    modelplane::install_crypto_provider();
    let via = Via::Direct(reqwest::Client::new());
    let timeout = Duration::from_secs(1);

    // Nothing listens: bind a port, then free it.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = free.local_addr().unwrap().port() as i32;
    drop(free);
    let err = scrape(&via, &pod_at(port), port, timeout, 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(err, ScrapeError::Unreachable(_)), "{err}");

    // Garbage: served, but not the text format.
    let (pod, port) =
        serve_page(axum::Router::new().route("/metrics", get(|| async { "<html>oops</html>\n" })))
            .await;
    let text = scrape(&via, &pod, port, timeout, 1 << 20).await.unwrap();
    let err = read(MetricsDialect::Vllm, &text).unwrap_err();
    assert!(
        err.to_string().contains("not the Prometheus text format"),
        "{err}"
    );

    // 50 MB, streamed without a length: reading stops at the cap.
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let huge = move || {
        let counted = counted.clone();
        async move {
            let chunk = axum::body::Bytes::from(vec![b'#'; 1 << 20]);
            let stream = futures::stream::iter((0..50).map(move |_| {
                counted.fetch_add(1 << 20, Ordering::SeqCst);
                Ok::<_, std::io::Error>(chunk.clone())
            }));
            axum::body::Body::from_stream(stream)
        }
    };
    let (pod, port) = serve_page(axum::Router::new().route("/metrics", get(huge))).await;
    let err = scrape(&via, &pod, port, Duration::from_secs(10), 8 << 20)
        .await
        .unwrap_err();
    assert_eq!(err, ScrapeError::TooLarge(8 << 20));
    assert!(
        sent.load(Ordering::SeqCst) < 50 << 20,
        "the whole page was produced"
    );

    // Slow: no answer within the time box.
    let (pod, port) = serve_page(axum::Router::new().route(
        "/metrics",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            ""
        }),
    ))
    .await;
    let started = Instant::now();
    let err = scrape(&via, &pod, port, timeout, 1 << 20)
        .await
        .unwrap_err();
    assert_eq!(err, ScrapeError::Timeout(1));
    assert!(started.elapsed() < Duration::from_secs(5));

    // An HTTP error status.
    let (pod, port) = serve_page(axum::Router::new()).await;
    let err = scrape(&via, &pod, port, timeout, 1 << 20)
        .await
        .unwrap_err();
    assert_eq!(err, ScrapeError::Status(404));
}

/// A canary's load is reported on its own track: requests sent with the canary header reach
/// only the canary's pod, and `status.canary.load` carries them while the stable track's
/// series shows none.
#[sqlx::test]
async fn a_canarys_load_is_reported_on_its_own_track(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.collect_load();
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    let record = ready(&h, "qwen").await;
    let base = record["status"]["endpoints"]["openaiBase"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/canary",
            &json!({"spec": {"engine": {"args": ["--time-to-first-token=10ms"]}}, "weight": 0}),
        )
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    wait_for(
        "the canary track ready",
        Duration::from_secs(60),
        || async { h.deployment("qwen").await["status"]["canary"]["replicas"]["ready"] == 1 },
    )
    .await;
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let model = models["data"][0]["id"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let send = || async {
        let response = client
            .post(format!("{base}/completions"))
            .header("x-modelplane-canary", "true")
            .json(&json!({"model": model, "prompt": "hello there", "max_tokens": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    };
    wait_for(
        "the canary's requests in its load",
        Duration::from_secs(30),
        || async {
            send().await;
            let d = h.deployment("qwen").await;
            d["status"]["canary"]["load"]["requestsPerSecond"]
                .as_f64()
                .is_some_and(|r| r > 0.0)
        },
    )
    .await;
    let d = h.deployment("qwen").await;
    assert_eq!(d["status"]["canary"]["load"]["pods"], 1);
    assert_eq!(
        d["status"]["load"]["pods"], 2,
        "the whole deployment: both tracks"
    );
    let stable: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/metrics?window=5m&step=1s&series=requestsPerSecond&track=stable")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        stable["series"][0]["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .all(|r| r == 0.0),
        "the stable track served none of them: {stable}"
    );
}

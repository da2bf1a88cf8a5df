//! Serving metrics read from a real Prometheus (`Source::Prometheus`, what
//! `MODELPLANE_PROMETHEUS_URL` selects) instead of from the pods: a `prometheus` child
//! process scrapes the emulator's sim pods through the API server's
//! `pods/{pod}:{port}/proxy/metrics`, as a Prometheus outside the cluster would, and the
//! collector's PromQL answers become `status.load`.
//!
//! Prometheus is the one on PATH; `scripts/install-prometheus.sh` installs it (the test
//! command runs it when it is missing). Without it these tests fail, never skip.
//!
//! Discovery: Debian's Prometheus (the package that script installs, 2.42) is built
//! without `kubernetes_sd_configs` (its config parser refuses the field: Debian drops the
//! Kubernetes client from the build), so `file_sd_configs` is the discovery the emulator
//! can be given here. The test lists the model server pods from the emulator and writes the
//! target groups the `kubernetes_sd_configs` pod role would make of them, with the
//! `__meta_kubernetes_*` labels it sets (prometheus/prometheus
//! docs/configuration/configuration.md, "<kubernetes_sd_config>", role `pod`; built in
//! discovery/kubernetes/pod.go, one target per container port), in the file format of
//! "<file_sd_config>" (a JSON list of `{"targets": [...], "labels": {...}}`). The
//! relabeling ("<relabel_config>": `keep`, `drop`, `replace`, `labelmap`) is the one a
//! Prometheus with Kubernetes discovery would use unchanged.

use super::load::{cluster, ready};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use modelplane::reconciler::load::{Collector, LoadSettings, PromSource, Source};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::process::{Child, Command};

use super::{Harness, LOAD_INTERVAL, create_with, harness_on, sim_spec, wait_for};
use crate::common::{Options, TestApp};

/// The range of the collector's `rate()`s: `max(4 × interval, 60 s)` (collector.rs), so
/// 60 s with the tests' one-second interval.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Prometheus' scrape interval (and timeout).
const SCRAPE: &str = "1s";
/// The canary's image: any change of the spec makes a canary.
const CANARY_IMAGE: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.6.0";

/// Starts a collector reading `source` every [`LOAD_INTERVAL`], as `Harness::collect_load`
/// starts one reading the pods.
fn collect_from(h: &Harness, source: PromSource) {
    let settings = LoadSettings {
        interval: LOAD_INTERVAL,
        timeout: Duration::from_secs(5),
        max_bytes: 8 << 20,
        source: Source::Prometheus(source),
        installation: "test".into(),
    };
    let collector = Collector::new(h.pool.clone(), h.kube.clone(), settings, h.health.clone())
        .with_pods_from(h.seen.clone());
    tokio::spawn(collector.run(h.shutdown.clone()));
}

/// A loopback port nothing listens on (bound, then freed).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What the scrape config does with the discovered pods (the same under
/// `kubernetes_sd_configs: [{role: pod, api_server: <API server URL>}]`): keep the `http`
/// port of modelplane's model server pods that run, scrape it through the API server's pod
/// proxy (`__address__` the API server, `__metrics_path__` the proxy path; `instance` the
/// pod, so that each pod is its own series), and copy the deployment id and track pod
/// labels onto every series (`labelmap`), named as `PromSource` reads them
/// (`modelplane_io_deployment_id`, `modelplane_io_track`). Inside the cluster the three
/// proxy rules go, and Prometheus scrapes the pod's own address.
const RELABEL_CONFIGS: &str = r#"
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name, __meta_kubernetes_pod_labelpresent_modelplane_io_deployment_id, __meta_kubernetes_pod_container_port_name]
        regex: model-server;true;http
        action: keep
      - source_labels: [__meta_kubernetes_pod_phase]
        regex: Pending|Succeeded|Failed|Unknown
        action: drop
      - source_labels: [__meta_kubernetes_namespace, __meta_kubernetes_pod_name, __meta_kubernetes_pod_container_port_number]
        regex: (.+);(.+);(.+)
        target_label: __metrics_path__
        replacement: /api/v1/namespaces/$1/pods/$2:$3/proxy/metrics
      - source_labels: [__meta_kubernetes_namespace, __meta_kubernetes_pod_name, __meta_kubernetes_pod_container_port_number]
        regex: (.+);(.+);(.+)
        target_label: instance
        replacement: $1/$2:$3
      - target_label: __address__
        replacement: API_SERVER_ADDRESS
      - action: labelmap
        regex: __meta_kubernetes_pod_label_(modelplane_io_deployment_id|modelplane_io_track)
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
"#;

fn scrape_config(api_server: &str, targets_file: &Path) -> String {
    format!(
        r#"global:
  scrape_interval: {SCRAPE}
  scrape_timeout: {SCRAPE}
scrape_configs:
  - job_name: model-servers
    file_sd_configs:
      - files: [{targets}]
    scheme: http
    # The API server's credentials for the proxied scrapes (the emulator ignores them).
    authorization:
      credentials: emulator
    relabel_configs:{relabel}"#,
        targets = targets_file.display(),
        relabel = RELABEL_CONFIGS.replace("API_SERVER_ADDRESS", api_server),
    )
}

/// `s` as Prometheus makes a label name of it (strutil.SanitizeLabelName: every character
/// outside `[a-zA-Z0-9_]` becomes `_`), as the pod role does with pod label names.
fn sanitized(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The target groups the `kubernetes_sd_configs` pod role makes of `pods`: one target per
/// container port (`<pod IP>:<port>`), with the pod's `__meta_kubernetes_namespace`,
/// `_pod_name`, `_pod_ip`, `_pod_phase`, `_pod_uid`, `_pod_label_<name>` and
/// `_pod_labelpresent_<name>` for each pod label, and the port's `_pod_container_name`,
/// `_pod_container_port_name`, `_pod_container_port_number` and
/// `_pod_container_port_protocol`.
fn pod_targets(pods: &[Value]) -> Value {
    let mut groups = Vec::new();
    for pod in pods {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let meta = &pod["metadata"];
        let ip = text(&pod["status"]["podIP"]);
        let mut labels = BTreeMap::from([
            (
                "__meta_kubernetes_namespace".to_owned(),
                text(&meta["namespace"]),
            ),
            ("__meta_kubernetes_pod_name".to_owned(), text(&meta["name"])),
            ("__meta_kubernetes_pod_ip".to_owned(), ip.clone()),
            (
                "__meta_kubernetes_pod_phase".to_owned(),
                text(&pod["status"]["phase"]),
            ),
            ("__meta_kubernetes_pod_uid".to_owned(), text(&meta["uid"])),
        ]);
        for (name, value) in meta["labels"].as_object().into_iter().flatten() {
            let name = sanitized(name);
            labels.insert(format!("__meta_kubernetes_pod_label_{name}"), text(value));
            labels.insert(
                format!("__meta_kubernetes_pod_labelpresent_{name}"),
                "true".to_owned(),
            );
        }
        for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
            for port in container["ports"].as_array().into_iter().flatten() {
                let number = port["containerPort"].as_i64().unwrap();
                let mut labels = labels.clone();
                labels.extend([
                    (
                        "__meta_kubernetes_pod_container_name".to_owned(),
                        text(&container["name"]),
                    ),
                    (
                        "__meta_kubernetes_pod_container_port_name".to_owned(),
                        text(&port["name"]),
                    ),
                    (
                        "__meta_kubernetes_pod_container_port_number".to_owned(),
                        number.to_string(),
                    ),
                    (
                        "__meta_kubernetes_pod_container_port_protocol".to_owned(),
                        port["protocol"].as_str().unwrap_or("TCP").to_owned(),
                    ),
                ]);
                groups.push(json!({"targets": [format!("{ip}:{number}")], "labels": labels}));
            }
        }
    }
    Value::Array(groups)
}

/// The model server pods of every namespace, once `count` of them run and are ready.
async fn ready_model_servers(h: &Harness, count: usize) -> Vec<Value> {
    let api: Api<Pod> = Api::all(h.kube.clone());
    let params = ListParams::default().labels("app.kubernetes.io/name=model-server");
    let ready = |pod: &Pod| {
        pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    wait_for(
        &format!("{count} ready model server pods"),
        Duration::from_secs(30),
        || async {
            api.list(&params)
                .await
                .unwrap()
                .items
                .iter()
                .filter(|p| ready(p))
                .count()
                == count
        },
    )
    .await;
    let pods = api.list(&params).await.unwrap().items;
    assert_eq!(pods.len(), count, "only ready pods are left");
    pods.iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect()
}

/// A `prometheus` child process scraping the targets in its file every second, with its
/// storage in a temporary folder, on a free loopback port; killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("prometheus' log:\n{}", self.log());
        }
        if let Err(e) = self.child.start_kill() {
            eprintln!("could not stop prometheus: {e}");
        }
    }
}

impl Prometheus {
    /// Starts it scraping `targets` (file_sd target groups) through `api_server`
    /// (`host:port`).
    fn start(api_server: &str, targets: &Value) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let targets_file = dir.path().join("targets.json");
        std::fs::write(&targets_file, targets.to_string()).unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, scrape_config(api_server, &targets_file)).unwrap();
        // Prometheus takes no port 0: a port free a moment ago.
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `prometheus` ({e}): install it with scripts/install-prometheus.sh \
                     (the test command does when it is missing)"
                )
            });
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// Its log so far (shown when a test fails).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

/// One completion the clients got back.
struct Done {
    /// When its answer had been read.
    at: DateTime<Utc>,
    canary: bool,
    prompt_tokens: u64,
    completion_tokens: u64,
}

/// `clients` closed-loop clients sending completions at `url` until `stop`, logging each
/// answer with the track of the pod that gave it (the emulator's data plane names it in
/// `x-emulator-pod`; canary pods are `<name>-canary-…`).
fn drive(
    url: String,
    model: String,
    clients: usize,
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Vec<Done>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (url, model, stop, done) = (url.clone(), model.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while !stop.load(Ordering::SeqCst) {
                    let response = client
                        .post(&url)
                        .json(&json!({"model": model, "prompt": "one two three four five six seven eight", "max_tokens": 3}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), StatusCode::OK);
                    let pod = response.headers()["x-emulator-pod"].to_str().unwrap().to_owned();
                    let body: Value = response.json().await.unwrap();
                    done.lock().unwrap().push(Done {
                        at: Utc::now(),
                        canary: pod.starts_with("qwen-canary-"),
                        prompt_tokens: body["usage"]["prompt_tokens"].as_u64().unwrap(),
                        completion_tokens: body["usage"]["completion_tokens"].as_u64().unwrap(),
                    });
                }
            })
        })
        .collect()
}

/// Requests, prompt tokens and completion tokens per second of the answers in `done` (of
/// the canary only, with `canary_only`) that came within the rate window ending at `as_of`:
/// the range `rate()` read at that reading.
fn client_rates(done: &[Done], as_of: DateTime<Utc>, canary_only: bool) -> [f64; 3] {
    let from = as_of - chrono::Duration::from_std(RATE_WINDOW).unwrap();
    let mut sums = [0u64; 3];
    for d in done
        .iter()
        .filter(|d| from < d.at && d.at <= as_of && (d.canary || !canary_only))
    {
        sums[0] += 1;
        sums[1] += d.prompt_tokens;
        sums[2] += d.completion_tokens;
    }
    sums.map(|s| s as f64 / RATE_WINDOW.as_secs_f64())
}

fn as_of(load: &Value) -> DateTime<Utc> {
    load["asOf"].as_str().unwrap().parse().unwrap()
}

/// Each reported rate of `load` within 10% of what the clients counted over its window.
#[track_caller]
fn within_10_percent(what: &str, load: &Value, done: &[Done], canary_only: bool) {
    let sent = client_rates(done, as_of(load), canary_only);
    for (field, sent) in [
        "requestsPerSecond",
        "promptTokensPerSecond",
        "generationTokensPerSecond",
    ]
    .into_iter()
    .zip(sent)
    {
        let got = load[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no {field}: {load}"));
        assert!(
            sent > 0.0,
            "{what}: the clients counted nothing in the window"
        );
        assert!(
            (got - sent).abs() <= sent * 0.10,
            "{what} {field}: reported {got}, sent {sent} over the window (more than 10% apart): {load}"
        );
        eprintln!(
            "{what} {field}: reported {got:.3}, sent {sent:.3} ({:+.1}%)",
            (got - sent) / sent * 100.0
        );
    }
}

#[track_caller]
fn fresh(what: &str, load: &Value, pods: i64) {
    assert_eq!(load["stale"], false, "{what}: {load}");
    assert_eq!(load["dialect"], "vllm", "{what}: {load}");
    assert_eq!(
        (load["pods"].clone(), load["podsRead"].clone()),
        (json!(pods), json!(pods)),
        "{what}: {load}"
    );
}

/// A sim deployment and its canary (half the traffic each), scraped by a real Prometheus
/// through the API server's pod proxy; steady load through the Gateway. Every reading's
/// requests/s and tokens/s, of the whole deployment (`status.load`) and of the canary
/// track (`status.canary.load`), are within 10% of what the clients counted over the same
/// window `rate()` read: the 60 s ending at the reading's `asOf`, counted from each
/// answer's arrival. Readings are taken once the load has run 10 s (the window then holds
/// enough of it that the last scrape interval, which Prometheus has not yet seen, is a few
/// percent of it), and once after the load (the window then holds all of it). The window
/// is the collector's fixed 60 s: comparing over the same window needs no minute of load.
#[sqlx::test]
async fn the_promql_path_reports_what_the_sim_pods_served(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["args"] = json!([
        "--max-num-seqs=4",
        "--time-to-first-token=50ms",
        "--inter-token-latency=10ms"
    ]);
    create_with(&h, "qwen", spec).await;
    ready(&h, "qwen").await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/canary",
            &json!({"spec": {"engine": {"image": CANARY_IMAGE}}, "weight": 50}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let generation = response.json::<Value>().await.unwrap()["generation"].clone();
    wait_for(
        "the canary to take 50%",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["observedGeneration"] == generation
                && r["status"]["phase"] == "Ready"
                && r["status"]["canary"]["phase"] == "Ready"
                && r["status"]["canary"]["routedWeight"] == 50
        },
    )
    .await;
    let (base, model) = super::load::openai(&h.deployment("qwen").await).await;

    // Prometheus, given the two pods as the pod role would discover them.
    let pods = ready_model_servers(&h, 2).await;
    let api_server = h.emulator.as_ref().unwrap().addr().to_string();
    let prometheus = Prometheus::start(&api_server, &pod_targets(&pods));
    let source = PromSource::new(&prometheus.url, Duration::from_secs(5)).unwrap();
    wait_for("Prometheus ready", Duration::from_secs(30), || async {
        source.ready().await.is_ok()
    })
    .await;
    collect_from(&h, source);

    // Before any request: a fresh reading of zero from both pods (two scrapes of each,
    // so that rate() has its two samples).
    wait_for(
        "a first reading from Prometheus",
        Duration::from_secs(30),
        || async {
            let status = &h.deployment("qwen").await["status"];
            status["load"]["requestsPerSecond"] == json!(0.0)
                && status["load"]["podsRead"] == 2
                && status["canary"]["load"]["requestsPerSecond"] == json!(0.0)
                && status["canary"]["load"]["podsRead"] == 1
        },
    )
    .await;
    let status = h.deployment("qwen").await["status"].clone();
    fresh("idle", &status["load"], 2);
    fresh("idle canary", &status["canary"]["load"], 1);

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(Vec::new()));
    let started = Utc::now();
    let clients = drive(
        format!("{base}/completions"),
        model,
        6,
        stop.clone(),
        done.clone(),
    );

    // Five readings (one per round) once the load has run 10 s.
    let steady_from = started + chrono::Duration::seconds(10);
    let readings = RefCell::new(Vec::<Value>::new());
    wait_for(
        "five readings of steady load",
        Duration::from_secs(40),
        || async {
            let status = h.deployment("qwen").await["status"].clone();
            let mut readings = readings.borrow_mut();
            let new = readings
                .last()
                .is_none_or(|r: &Value| r["load"]["asOf"] != status["load"]["asOf"]);
            if new && as_of(&status["load"]) >= steady_from {
                readings.push(status);
            }
            readings.len() >= 5
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let stopped = Utc::now();
    let done = std::mem::take(&mut *done.lock().unwrap());
    eprintln!(
        "{} completions ({} by the canary) in {:.1} s",
        done.len(),
        done.iter().filter(|d| d.canary).count(),
        (stopped - started).as_seconds_f64()
    );
    for status in readings.borrow().iter() {
        fresh("steady", &status["load"], 2);
        fresh("steady canary", &status["canary"]["load"], 1);
        assert_eq!(status["load"]["asOf"], status["canary"]["load"]["asOf"]);
        within_10_percent("steady", &status["load"], &done, false);
        within_10_percent("steady canary", &status["canary"]["load"], &done, true);
    }

    // Once every answer is in a scrape (a few scrapes after the last), a window that holds
    // the whole load. rate() extrapolates from the last sample to the window's end at the
    // window's average rate, so this reading is above what was sent by up to one scrape
    // interval's share of the time Prometheus has sampled (about 25 s here: a few percent).
    let after = stopped + chrono::Duration::seconds(3);
    wait_for(
        "a reading after the load",
        Duration::from_secs(20),
        || async { as_of(&h.deployment("qwen").await["status"]["load"]) >= after },
    )
    .await;
    let status = h.deployment("qwen").await["status"].clone();
    let window_from = as_of(&status["load"]) - chrono::Duration::from_std(RATE_WINDOW).unwrap();
    assert!(window_from < started, "the load outlasted the rate window");
    fresh("after", &status["load"], 2);
    fresh("after canary", &status["canary"]["load"], 1);
    within_10_percent("after", &status["load"], &done, false);
    within_10_percent("after canary", &status["canary"]["load"], &done, true);
    drop(prometheus);
}

/// A Prometheus that does not answer (nothing listens at its URL): every reading is stale
/// with the reason naming Prometheus and its URL, and `/readyz` reports a failing
/// `prometheus` check, which degrades readiness without failing it (200, `degraded`): the
/// serving metrics are not what the process serves.
#[sqlx::test]
async fn a_prometheus_that_is_down_makes_load_stale_and_readyz_degraded(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    // The harness's API reports no worker in /readyz: this one reports the harness's,
    // whose health the collector writes the Prometheus result into (as `serve --role all`),
    // on a pool of its own (the test's pool is sized for one app and one worker).
    let own_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect_with((*h.pool.connect_options()).clone())
        .await
        .unwrap();
    let app = TestApp::spawn_with(
        own_pool,
        Options {
            worker: Some(h.health.clone()),
            load_interval: LOAD_INTERVAL,
            ..Options::default()
        },
    )
    .await;
    let port = free_port();
    collect_from(
        &h,
        PromSource::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(2)).unwrap(),
    );
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    ready(&h, "qwen").await;
    wait_for(
        "a stale reading of the ready pod",
        Duration::from_secs(20),
        || async {
            let load = &h.deployment("qwen").await["status"]["load"];
            load["stale"] == true && load["pods"] == 1
        },
    )
    .await;
    let load = h.deployment("qwen").await["status"]["load"].clone();
    let unreachable = format!("Prometheus at http://127.0.0.1:{port}/api/v1/query is unreachable");
    let reason = load["reason"].as_str().unwrap();
    assert!(reason.starts_with(&unreachable), "{reason}");
    assert_eq!(load["podsRead"], 0, "{load}");
    assert_eq!(load["dialect"], "vllm", "{load}");

    let response = reqwest::get(format!("{}/readyz", app.base)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "degraded", "{body}");
    let check = |name: &str| {
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {body}"))
            .clone()
    };
    let prometheus = check("prometheus");
    assert_eq!(
        (prometheus["ok"].clone(), prometheus["required"].clone()),
        (json!(false), json!(false)),
        "{prometheus}"
    );
    let message = prometheus["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("serving metrics are stale: {unreachable}")),
        "{message}"
    );
    assert_eq!(check("database")["ok"], true, "{body}");
    assert_eq!(check("worker")["ok"], true, "{body}");
}

//! The pod proxy subresource through the real `kube` client: requests to
//! `/api/v1/namespaces/{ns}/pods/{name}[:port]/proxy/{path...}` reach that pod (a `sim`
//! pod answers with its simulator, vLLM-style `/metrics` included, as modelplane's worker
//! reads them from outside the cluster), and the errors are the real server's.
//!
//! Sources: kubernetes pkg/registry/core/pod/rest/subresources.go (ProxyREST: the methods,
//! the `path` option joined with net.JoinPreservingTrailingSlash, the wrapped transport),
//! pkg/registry/core/pod/strategy.go (`ResourceLocation`: the id's forms, the pod read,
//! the default port, the pod IP check), k8s.io/apimachinery pkg/util/net/port_split.go
//! (`SplitSchemeNamePort`) and pkg/util/proxy/transport.go (dial failures as 503
//! `error trying to reach service: ...`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
const SIM: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1";

async fn start() -> (RunningEmulator, Client) {
    let emu = Emulator::builder()
        .nodes(1)
        .start_delay(Duration::from_millis(100))
        .crash_images("registry.example/crasher*")
        // A crashed container stays down for the whole test.
        .restart_backoff(Duration::from_secs(60))
        .start()
        .await
        .expect("emulator starts");
    // kube's default client retries 503 answers (RetryPolicy::server_retry), which would
    // make each expected 503 below take minutes: this client does not retry.
    let mut config = Config::new(emu.url().parse().unwrap());
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    (emu, client)
}

/// A pod named `name` running `image` with one container `server`; a `sim` engine pod
/// (as modelplane labels it) when the image is the simulator's.
async fn pod(client: &Client, name: &str, image: &str, ports: Value, extra: Value) {
    let mut labels = json!({"app": name});
    if image == SIM {
        labels["modelplane.io/engine"] = json!("sim");
    }
    let mut spec = json!({"containers": [{
        "name": "server", "image": image, "args": ["--model", "m", "--port", "8000"],
        "ports": ports,
    }]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels}, "spec": spec});
    let p: Pod = serde_json::from_value(p).unwrap();
    Api::<Pod>::default_namespaced(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

/// Waits until pod `name` satisfies `ok`, and returns it.
async fn pod_where(client: &Client, name: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let p = pods.get(name).await.unwrap();
        if ok(&p) {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for pod {name}: {:?}",
            p.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn running(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

fn ip(p: &Pod) -> String {
    p.status.as_ref().unwrap().pod_ip.clone().unwrap()
}

fn proxy(id: &str, path: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{id}/proxy{path}")
}

#[path = "support/raw.rs"]
mod raw;
use raw::{failure, send};

// ProxyREST.Connect (pod/rest/subresources.go): ResourceLocation builds the pod's
// location `{podIP}:{port}`, the `path` option is joined to it, and the pod's status,
// headers and body come back. Without a port, the first container's first port is used
// ("If port is not specified, try to use the first defined port on the pod").
#[tokio::test]
async fn a_sim_pods_metrics_are_read_through_the_pod_proxy() {
    let (emu, client) = start().await;
    pod(
        &client,
        "qwen-0",
        SIM,
        json!([{"name": "http", "containerPort": 8000}]),
        json!({}),
    )
    .await;
    pod_where(&client, "qwen-0", running).await;

    // `name:port` with the container port, as modelplane's worker reads the metrics.
    let r = send(&client, "GET", &proxy("qwen-0:8000", "/metrics"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body
            .contains("vllm:num_requests_running{model_name=\"m\"} 0"),
        "{}",
        r.body
    );
    assert!(r.body.contains("vllm:num_requests_waiting"), "{}", r.body);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.pod(), "qwen-0");
    // `request_text`, as a kube user without raw bodies would read them.
    let req = http::Request::get(proxy("qwen-0:8000", "/metrics"))
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(req).await.unwrap();
    assert!(text.contains("vllm:num_requests_running"), "{text}");

    // No port: the first declared container port (8000); the scheme forms; a path with
    // `.` and `..` cleaned as net.JoinPreservingTrailingSlash cleans it.
    for id in ["qwen-0", "http:qwen-0:8000", "https:qwen-0:8000"] {
        let r = send(&client, "GET", &proxy(id, "/metrics"), None).await;
        assert_eq!(r.status, 200, "{id}: {}", r.body);
        assert!(r.body.contains("vllm:num_requests_running"), "{id}");
    }
    let r = send(&client, "GET", &proxy("qwen-0", "/x/../v1/./models"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["data"][0]["id"], "m");

    // Other methods reach the pod with their body: a chat completion.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hello there"}]});
    let r = send(
        &client,
        "POST",
        &proxy("qwen-0:8000", "/v1/chat/completions"),
        Some(chat),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "hello there");

    // The request log and apiserver_request_total see a CONNECT on pods/proxy.
    assert!(emu.requests().snapshot().iter().any(|e| e.path
        == "/api/v1/namespaces/default/pods/qwen-0:8000/proxy/metrics"
        && e.status == 200));
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let metrics = client.request_text(req).await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{")
                && l.contains("verb=\"CONNECT\"")
                && l.contains("resource=\"pods\"")
                && l.contains("subresource=\"proxy\"")),
        "{metrics}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn pod_proxy_errors_are_the_api_servers() {
    let (emu, client) = start().await;
    pod(
        &client,
        "qwen-0",
        SIM,
        json!([{"name": "http", "containerPort": 8000}]),
        json!({}),
    )
    .await;
    pod(
        &client,
        "vllm-0",
        "vllm/vllm-openai:v0.9.1",
        json!([{"containerPort": 8000}]),
        json!({}),
    )
    .await;
    pod(&client, "portless", SIM, json!([]), json!({})).await;
    pod(
        &client,
        "crashy",
        "registry.example/crasher:1",
        json!([{"containerPort": 8000}]),
        json!({}),
    )
    .await;
    // No node has the selected label: never scheduled, never given an IP.
    pod(
        &client,
        "stuck",
        SIM,
        json!([{"containerPort": 8000}]),
        json!({"nodeSelector": {"example.com/none": "x"}}),
    )
    .await;
    let qwen = pod_where(&client, "qwen-0", running).await;
    pod_where(&client, "vllm-0", running).await;
    let portless = pod_where(&client, "portless", running).await;
    // A crash-looping pod keeps its IP while its container is down.
    let crashy = pod_where(&client, "crashy", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().all(|c| {
                    c.state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                })
            })
    })
    .await;

    // getPod: NotFound on pods.
    let s = failure(&client, "GET", &proxy("nope:8000", "/metrics")).await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "pods \"nope\" not found");
    let d = s.details.unwrap();
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("nope", "pods"));

    // SplitSchemeNamePort: a scheme other than http or https.
    let s = failure(&client, "GET", &proxy("ftp:qwen-0:8000", "/metrics")).await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(s.message, "invalid pod request \"ftp:qwen-0:8000\"");

    // Two parts are always `name:port`: "https:portless" names a pod "https".
    let s = failure(&client, "GET", &proxy("https:portless", "/metrics")).await;
    assert_eq!(s.message, "pods \"https\" not found");

    // A pod without an IP (unschedulable, Pending): getPodIP is "", which
    // ParseIPSloppy rejects: BadRequest "address not allowed".
    let stuck = Api::<Pod>::default_namespaced(client.clone())
        .get("stuck")
        .await
        .unwrap();
    assert_eq!(
        stuck.status.as_ref().and_then(|s| s.pod_ip.as_ref()),
        None,
        "{:?}",
        stuck.status
    );
    let s = failure(&client, "GET", &proxy("stuck:8000", "/metrics")).await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(s.message, "address not allowed");

    // Nothing listens there: the wrapped transport's 503 with Go's dial error. A port
    // the pod does not declare; a crash-looping container's port; a pod declaring no
    // port, dialled on http's 80; a port name, which Go's dialer resolves as a service
    // name (http is 80, not the container port named http) or fails to.
    let refused = |ip: &str, port: u16| {
        format!("error trying to reach service: dial tcp {ip}:{port}: connect: connection refused")
    };
    for (id, want) in [
        ("qwen-0:9090", refused(&ip(&qwen), 9090)),
        ("crashy:8000", refused(&ip(&crashy), 8000)),
        ("portless", refused(&ip(&portless), 80)),
        ("https:portless:", refused(&ip(&portless), 443)),
        ("qwen-0:http", refused(&ip(&qwen), 80)),
        (
            "qwen-0:metrics",
            "error trying to reach service: dial tcp: lookup tcp/metrics: unknown port".into(),
        ),
    ] {
        let s = failure(&client, "GET", &proxy(id, "/metrics")).await;
        assert_eq!(
            (s.code, s.reason.as_str()),
            (503, "ServiceUnavailable"),
            "{id}"
        );
        assert_eq!(s.message, want, "{id}");
    }

    // A pod of another engine: the data plane's answer for it, passed back.
    let r = send(&client, "GET", &proxy("vllm-0:8000", "/metrics"), None).await;
    assert_eq!(r.status, 503, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("no real model server runs in the Kubernetes emulator: pod default/vllm-0"),
        "{msg}"
    );
    assert_eq!(r.pod(), "vllm-0");

    // Only the connecter's methods are routed (GET POST PUT PATCH DELETE HEAD OPTIONS).
    let r = send(&client, "TRACE", &proxy("qwen-0:8000", "/"), None).await;
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(r.json()["reason"], "MethodNotAllowed");
    let r = send(&client, "HEAD", &proxy("qwen-0:8000", "/metrics"), None).await;
    assert_eq!(r.pod(), "qwen-0", "{}", r.status);
    emu.shutdown().await;
}

// Discovery lists the connecter as the installer does: the kind of its connect options
// (PodProxyOptions) and the verbs its methods map to.
#[tokio::test]
async fn discovery_lists_pods_proxy() {
    let (emu, client) = start().await;
    let resources = client.list_core_api_resources("v1").await.unwrap();
    let pods_proxy = resources
        .resources
        .iter()
        .find(|r| r.name == "pods/proxy")
        .expect("pods/proxy in discovery");
    assert_eq!(pods_proxy.kind, "PodProxyOptions");
    assert!(pods_proxy.namespaced);
    assert_eq!(
        pods_proxy.verbs,
        ["create", "delete", "get", "patch", "update"]
    );
    assert!(resources.resources.iter().any(|r| r.name == "pods/binding"));
    emu.shutdown().await;
}

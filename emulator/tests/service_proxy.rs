//! The service proxy subresource through the real `kube` client: requests to
//! `/api/v1/namespaces/{ns}/services/{name}/proxy/{path...}` reach a ready pod of the
//! Service (a `sim` pod answers OpenAI requests), and the errors are the real server's.
//!
//! Sources: kubernetes pkg/registry/core/service/proxy.go (ProxyREST: the methods, the
//! path joined with net.JoinPreservingTrailingSlash), pkg/registry/core/service/storage/
//! storage.go (`ResourceLocation`: the id's forms, the port by number or name, the
//! Endpoints read and the errors), k8s.io/apimachinery pkg/util/net/port_split.go
//! (`SplitSchemeNamePort`), pkg/controller/endpoint/endpoints_controller.go (which pods
//! are addresses).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};

const SIM: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1";
const CRASHER: &str = "registry.example/crasher:1";

async fn start() -> (RunningEmulator, Client) {
    let emu = Emulator::builder()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .crash_images("registry.example/crasher*")
        .gateway("gateway-system", "public")
        .start()
        .await
        .expect("emulator starts");
    // kube's default client retries 503 answers (RetryPolicy::server_retry in
    // kube-client src/client/retry.rs: up to 15 times, backing off from 5 ms), which
    // would make each expected 503 below take minutes: this client does not retry.
    let mut config = Config::new(emu.url().parse().unwrap());
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    (emu, client)
}

/// A Deployment of `replicas` pods labelled `app=<name>` running `image` with `args`
/// (a `sim` engine pod as modelplane renders it when the image is the simulator's).
async fn deploy(client: &Client, name: &str, replicas: i32, image: &str, args: &[&str]) {
    let mut labels = json!({"app": name});
    if image == SIM {
        labels["modelplane.io/engine"] = json!("sim");
    }
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "server", "image": image, "args": args,
                "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
            }]}},
        },
    });
    let d: Deployment = serde_json::from_value(d).unwrap();
    Api::<Deployment>::default_namespaced(client.clone())
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// A Service selecting `app=<selector>` with one port `http` 8000 -> container port `http`.
async fn service(client: &Client, name: &str, selector: &str) {
    let s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": selector},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}});
    let s: Service = serde_json::from_value(s).unwrap();
    Api::<Service>::default_namespaced(client.clone())
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// Waits until `n` pods of `app` satisfy `ok`.
async fn pods_where(client: &Client, app: &str, n: usize, ok: impl Fn(&Pod) -> bool) {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    wait_for(&format!("{n} pods of {app}"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .unwrap();
        (list.items.iter().filter(|p| ok(p)).count() == n).then_some(())
    })
    .await
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn proxy(service: &str, path: &str) -> String {
    format!("/api/v1/namespaces/default/services/{service}/proxy{path}")
}

#[path = "support/raw.rs"]
mod raw;
use raw::{failure, send};

#[path = "support/wait.rs"]
mod wait;
use wait::wait_for;

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello there"}]})
}

// ProxyREST.Connect (pkg/registry/core/service/proxy.go): ResourceLocation picks a ready
// endpoint address of the Service, the remaining path is joined to it, and the
// UpgradeAwareHandler sends the request (method, body, query) and passes back the
// endpoint's status, headers and body. The id may name the port by number ("qwen:8000",
// mapped to the Service port's name) or by name ("qwen:http").
#[tokio::test]
async fn chat_completions_reach_a_sim_pod_through_the_service_proxy() {
    let (emu, client) = start().await;
    deploy(&client, "qwen", 2, SIM, &["--model", "qwen-small"]).await;
    service(&client, "qwen", "qwen").await;
    pods_where(&client, "qwen", 2, is_ready).await;

    // The way modelplane's "Try it" sends it: a POST through the kube client.
    let req = http::Request::post(proxy("qwen:8000", "/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(chat("qwen-small").to_string().into_bytes())
        .unwrap();
    let text = client.request_text(req).await.unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    assert_eq!(answer["model"], "qwen-small");
    assert_eq!(answer["choices"][0]["message"]["content"], "hello there");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");

    // By port name; the answer carries the pod's headers; requests go round robin.
    let mut pods = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let r = send(
            &client,
            "POST",
            &proxy("qwen:http", "/v1/chat/completions"),
            Some(chat("qwen-small")),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.headers["content-type"], "application/json");
        assert!(r.pod().starts_with("qwen-"), "{:?}", r.headers);
        assert_eq!(r.headers["x-emulator-namespace"], "default");
        pods.insert(r.pod().to_string());
    }
    assert_eq!(pods.len(), 2, "{pods:?}");

    // GET with a query string; a trailing slash and `..` are cleaned like path.Join.
    let r = send(
        &client,
        "GET",
        &proxy("qwen:8000", "/v1/models?limit=1"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["data"][0]["id"], "qwen-small");
    let r = send(&client, "GET", &proxy("qwen:8000", "/x/../health"), None).await;
    assert_eq!((r.status, r.body.as_str()), (200, "OK\n"));
    // The endpoint's own error answers come back as they are (not as a Status).
    let r = send(
        &client,
        "POST",
        &proxy("qwen:8000", "/v1/chat/completions"),
        Some(chat("other-model")),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        r.json()["error"]["message"],
        "The model `other-model` does not exist."
    );
    let r = send(&client, "DELETE", &proxy("qwen:8000", "/v1/models"), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "NotFoundError");

    // The request log and apiserver_request_total see the connect requests.
    assert!(
        emu.requests()
            .snapshot()
            .iter()
            .any(|r| r.path == proxy("qwen:8000", "/v1/models") && r.query == "limit=1")
    );
    let metrics = send(&client, "GET", "/metrics", None).await.body;
    assert!(
        metrics.lines().any(|l| l.contains("resource=\"services\"")
            && l.contains("subresource=\"proxy\"")
            && l.contains("verb=\"CONNECT\"")
            && l.contains("code=\"200\"")),
        "{metrics}"
    );
    emu.shutdown().await;
}

// The proxy and the Gateway share the data plane: a request through the proxy counts in
// the sim pod's running requests (vLLM's vllm:num_requests_running, as
// llm-d-inference-sim exports it) as seen through the Gateway.
#[tokio::test]
async fn proxied_requests_count_in_the_pods_load() {
    let (emu, client) = start().await;
    deploy(
        &client,
        "slow",
        1,
        SIM,
        &["--model", "m", "--time-to-first-token", "1500"],
    )
    .await;
    service(&client, "slow", "slow").await;
    let route = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "slow"},
        "spec": {"parentRefs": [{"namespace": "gateway-system", "name": "public"}],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/slow"}}],
                            "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                            "backendRefs": [{"name": "slow", "port": 8000}]}]}});
    let gvk = kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "httproutes");
    Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), "default", &ar)
        .create(
            &PostParams::default(),
            &serde_json::from_value(route).unwrap(),
        )
        .await
        .unwrap();
    pods_where(&client, "slow", 1, is_ready).await;
    let gateway = emu.gateway_url().unwrap();
    let running = || async {
        let body = reqwest_get(&format!("{gateway}/slow/metrics")).await?;
        body.lines()
            .find(|l| l.starts_with("vllm:num_requests_running{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    wait_for("the route", || async {
        running().await.filter(|n| *n == 0.0)
    })
    .await;

    let c = client.clone();
    let call = tokio::spawn(async move {
        send(
            &c,
            "POST",
            &proxy("slow:8000", "/v1/chat/completions"),
            Some(chat("m")),
        )
        .await
    });
    wait_for("1 running request", || async {
        running().await.filter(|n| *n == 1.0)
    })
    .await;
    let r = call.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    wait_for("an idle pod", || async {
        running().await.filter(|n| *n == 0.0)
    })
    .await;
    emu.shutdown().await;
}

/// A plain HTTP/1.1 GET (the Gateway listener is not the API server).
async fn reqwest_get(url: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/')?;
    let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
    let req = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

// The errors of ResourceLocation (pkg/registry/core/service/storage/storage.go) and the
// routes of the connecter (k8s.io/apiserver pkg/endpoints/installer.go).
#[tokio::test]
async fn service_proxy_errors_are_the_api_servers() {
    let (emu, client) = start().await;
    deploy(&client, "qwen", 1, SIM, &["--model", "m"]).await;
    service(&client, "qwen", "qwen").await;
    deploy(
        &client,
        "vllm",
        1,
        "vllm/vllm-openai:v0.9.1",
        &["--model", "m"],
    )
    .await;
    service(&client, "vllm", "vllm").await;
    deploy(&client, "crashy", 1, CRASHER, &[]).await;
    service(&client, "crashy", "crashy").await;
    service(&client, "idle", "no-such-pods").await;
    pods_where(&client, "qwen", 1, is_ready).await;
    pods_where(&client, "vllm", 1, is_ready).await;
    // A crash-looping pod has an IP but is never Ready: a not-ready address.
    pods_where(&client, "crashy", 1, |p| {
        p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some() && !is_ready(p)
    })
    .await;

    // A port number reads the Service first: `r.Get` answers NotFound on services.
    let s = failure(&client, "POST", &proxy("nope:8000", "/v1/chat/completions")).await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "services \"nope\" not found");
    let d = s.details.unwrap();
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("nope", "services"));
    // By port name (or without a port) the Endpoints object is read: NotFound on
    // endpoints, which the endpoints controller removes with the Service.
    let s = failure(&client, "GET", &proxy("nope:http", "/")).await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "endpoints \"nope\" not found");
    assert_eq!(s.details.unwrap().kind, "endpoints");

    // A port number the Service does not have: "no service port %d found for service %q".
    let s = failure(&client, "POST", &proxy("qwen:9999", "/v1/chat/completions")).await;
    assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
    assert_eq!(s.message, "no service port 9999 found for service \"qwen\"");
    // A port name no endpoint port has, or no port when the Service's only port has a
    // name: no subset matches, "no endpoints available for service %q" with the id.
    let s = failure(&client, "GET", &proxy("qwen:grpc", "/v1/models")).await;
    assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
    assert_eq!(
        s.message,
        "no endpoints available for service \"qwen:grpc\""
    );
    let s = failure(&client, "GET", &proxy("qwen", "/v1/models")).await;
    assert_eq!(s.message, "no endpoints available for service \"qwen\"");

    // No pods behind the Service: the Endpoints have no subsets.
    let s = failure(&client, "POST", &proxy("idle:8000", "/v1/chat/completions")).await;
    assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
    assert_eq!(s.message, "no endpoints available for service \"idle\"");
    // Only a not-ready address: a subset, but no ready address; the message has the id.
    let s = failure(
        &client,
        "POST",
        &proxy("crashy:8000", "/v1/chat/completions"),
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
    assert_eq!(
        s.message,
        "no endpoints available for service \"crashy:8000\""
    );

    // SplitSchemeNamePort: a scheme other than http or https is a BadRequest.
    let s = failure(&client, "GET", &proxy("ftp:qwen:8000", "/")).await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(s.message, "invalid service request \"ftp:qwen:8000\"");
    // The scheme form itself is accepted.
    let r = send(&client, "GET", &proxy("http:qwen:8000", "/health"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // A pod of another engine: the data plane's answer for it, passed back.
    let r = send(
        &client,
        "POST",
        &proxy("vllm:8000", "/v1/chat/completions"),
        Some(chat("m")),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("no real model server runs in the Kubernetes emulator: pod default/vllm-"),
        "{msg}"
    );
    assert!(r.pod().starts_with("vllm-"), "{:?}", r.headers);

    // Only the connecter's methods are routed (GET POST PUT PATCH DELETE HEAD OPTIONS).
    let r = send(&client, "TRACE", &proxy("qwen:8000", "/"), None).await;
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(r.json()["reason"], "MethodNotAllowed");

    // Discovery lists the subresource with the verbs its methods map to.
    let resources = client.list_core_api_resources("v1").await.unwrap();
    let proxy_res = resources
        .resources
        .iter()
        .find(|r| r.name == "services/proxy")
        .expect("services/proxy in discovery");
    assert_eq!(proxy_res.kind, "ServiceProxyOptions");
    assert_eq!(
        proxy_res.verbs,
        ["create", "delete", "get", "patch", "update"]
    );
    emu.shutdown().await;
}

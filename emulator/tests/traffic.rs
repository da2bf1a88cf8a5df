//! Traffic through the Gateway data plane: HTTPRoute header/query matches and their
//! precedence, weighted backendRefs, InferencePool backends with the simulated endpoint
//! picker and the pool's status, and the sim pods' latency and `/metrics`. Every request
//! goes over HTTP to the data plane's real port; where a request went is read from the
//! `x-emulator-pod` response header.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};

#[path = "support/wait.rs"]
mod wait;
use wait::wait_for;

async fn start() -> (RunningEmulator, Client, SocketAddr) {
    let emu = Emulator::builder()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .gateway("gateway-system", "public")
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    let addr = emu.gateway_addr().unwrap();
    (emu, client, addr)
}

/// One answer of the data plane.
#[derive(Debug)]
struct Resp {
    status: u16,
    /// Header names in lower case.
    headers: BTreeMap<String, String>,
    body: String,
}

impl Resp {
    fn pod(&self) -> &str {
        self.headers
            .get("x-emulator-pod")
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// A minimal HTTP/1.1 client, one request per connection. The Host header is
/// `127.0.0.1` unless `headers` has one.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Resp {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let is_host = |k: &str| k.eq_ignore_ascii_case("host");
    let host = headers
        .iter()
        .find(|(k, _)| is_host(k))
        .map_or("127.0.0.1", |(_, v)| *v);
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers.iter().filter(|(k, _)| !is_host(k)) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        let mut out = String::new();
        let mut rest = rest;
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn api(client: &Client, kind: &str, ns: &str) -> Api<kube::api::DynamicObject> {
    let (group, version, plural) = match kind {
        "HTTPRoute" => ("gateway.networking.k8s.io", "v1", "httproutes"),
        "InferencePool" => ("inference.networking.k8s.io", "v1", "inferencepools"),
        "Service" => ("", "v1", "services"),
        _ => unreachable!(),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn apply(client: &Client, obj: Value) {
    let kind = obj["kind"].as_str().unwrap().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let obj: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    api(client, &kind, "default")
        .patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
}

async fn get(client: &Client, kind: &str, name: &str) -> Value {
    serde_json::to_value(api(client, kind, "default").get(name).await.unwrap()).unwrap()
}

/// A Deployment of `replicas` pods labelled `app=<name>` (plus `labels`) running
/// `image` with `args`, ready once started (as modelplane renders the sim engine).
async fn deploy(
    client: &Client,
    name: &str,
    replicas: i32,
    image: &str,
    args: &[&str],
    labels: Value,
) {
    let mut pod_labels = json!({"app": name, "modelplane.io/engine": "sim"});
    if !image.contains("llm-d-inference-sim") {
        pod_labels = json!({"app": name});
    }
    for (k, v) in labels.as_object().unwrap() {
        pod_labels[k] = v.clone();
    }
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": pod_labels}, "spec": {"containers": [{
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

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}})
}

const PARENT: &str = "public";

/// An HTTPRoute on the pre-created Gateway with these rules; every rule strips its
/// path prefix (so `/<prefix>/v1/models` reaches the pod as `/v1/models`).
fn route(name: &str, rules: Value) -> Value {
    let mut rules = rules;
    for r in rules.as_array_mut().unwrap() {
        r["filters"] = json!([{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]);
    }
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
           "metadata": {"name": name},
           "spec": {"parentRefs": [{"namespace": "gateway-system", "name": PARENT}], "rules": rules}})
}

fn prefix(p: &str) -> Value {
    json!({"path": {"type": "PathPrefix", "value": p}})
}

fn svc_ref(name: &str, weight: i64) -> Value {
    json!({"name": name, "port": 8000, "weight": weight})
}

/// Waits until `n` pods of `app` are Ready.
async fn ready(client: &Client, app: &str, n: usize) -> Vec<String> {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    wait_for(&format!("{n} ready pods of {app}"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .unwrap();
        let names: Vec<String> = list
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        (names.len() == n).then_some(names)
    })
    .await
}

/// Waits until the route is Accepted by our Gateway and a request to `path` is routed.
async fn routed(addr: SocketAddr, path: &str) {
    wait_for(&format!("a route for {path}"), || async {
        let r = http(addr, "GET", path, &[], None).await;
        (r.status != 404).then_some(())
    })
    .await;
}

/// The value of one of a sim pod's `/metrics` series.
fn metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Counts the answers of `n` requests by the deployment (pod name prefix) that answered.
fn by_deployment<'a>(pods: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for p in pods {
        // <deployment>-<pod-template-hash>-<suffix>
        let d = p.rsplitn(3, '-').nth(2).unwrap_or(p).to_string();
        *counts.entry(d).or_default() += 1;
    }
    counts
}

const SIM: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1";

// Weights, as the Gateway API defines them (BackendRef.Weight in
// kubernetes-sigs/gateway-api apis/v1/shared_types.go): "the proportion of requests
// forwarded to the referenced backend ... computed as weight/(sum of all weights in this
// BackendRefs list)", with "some epsilon" allowed; "If weight is set to 0, no traffic
// should be forwarded for this entry". A rule whose backendRefs are all invalid answers
// 500 (HTTPRouteRule.BackendRefs in apis/v1/httproute_types.go).
#[tokio::test]
async fn weighted_backend_refs_split_traffic_by_weight() {
    let (emu, client, addr) = start().await;
    deploy(&client, "stable", 2, SIM, &["--model", "m"], json!({})).await;
    deploy(&client, "canary", 1, SIM, &["--model", "m"], json!({})).await;
    deploy(&client, "off", 1, SIM, &["--model", "m"], json!({})).await;
    deploy(
        &client,
        "vllm",
        1,
        "vllm/vllm-openai:v0.9.0",
        &[],
        json!({}),
    )
    .await;
    for s in ["stable", "canary", "off", "vllm"] {
        apply(&client, service(s)).await;
    }
    apply(
        &client,
        route(
            "split",
            json!([
                {"matches": [prefix("/split")], "backendRefs": [svc_ref("stable", 80), svc_ref("canary", 20), svc_ref("off", 0)]},
                {"matches": [prefix("/nothing")], "backendRefs": [svc_ref("off", 0)]},
                {"matches": [prefix("/vllm")], "backendRefs": [svc_ref("vllm", 1)]},
            ]),
        ),
    )
    .await;
    let stable = ready(&client, "stable", 2).await;
    ready(&client, "canary", 1).await;
    ready(&client, "off", 1).await;
    ready(&client, "vllm", 1).await;
    routed(addr, "/split/v1/models").await;

    let mut pods = Vec::new();
    for _ in 0..1000 {
        let r = http(addr, "GET", "/split/v1/models", &[], None).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.headers["x-emulator-namespace"], "default");
        pods.push(r.pod().to_string());
    }
    let counts = by_deployment(pods.iter().map(String::as_str));
    // 80/20 of 1000 within ±3 percentage points (30 requests); weight 0 gets nothing.
    let stable_n = counts.get("stable").copied().unwrap_or(0);
    let canary_n = counts.get("canary").copied().unwrap_or(0);
    assert!(stable_n.abs_diff(800) <= 30, "{counts:?}");
    assert!(canary_n.abs_diff(200) <= 30, "{counts:?}");
    assert_eq!(counts.get("off"), None, "{counts:?}");
    assert_eq!(stable_n + canary_n, 1000, "{counts:?}");
    // The pod behind a backend is chosen independently of the weighted choice: both
    // stable pods share its 80% about evenly (±10% of it).
    for p in &stable {
        let n = pods.iter().filter(|x| *x == p).count();
        assert!(
            n.abs_diff(stable_n / 2) <= stable_n / 10,
            "{p}: {n} of {stable_n}"
        );
    }

    // A rule whose only backendRef has weight 0 has nowhere to send traffic.
    let r = http(addr, "GET", "/nothing/v1/models", &[], None).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.pod(), "");
    // A pod that is no sim engine answers 503, and is named too.
    let r = http(addr, "GET", "/vllm/v1/models", &[], None).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.pod().starts_with("vllm-"), "{r:?}");
    emu.shutdown().await;
}

// Precedence between rules, from the HTTPRouteRule doc comment in kubernetes-sigs/
// gateway-api apis/v1/httproute_types.go: an "Exact" path match, then the "Prefix" path
// match with the most characters, then a method match, then the largest number of header
// matches, then of query param matches; then the oldest route, then "{namespace}/{name}"
// alphabetically, then the first matching rule. Header names match case-insensitively
// (HTTPHeaderMatch.Name), and `type` defaults to Exact.
#[tokio::test]
async fn header_and_query_matches_take_precedence() {
    let (emu, client, addr) = start().await;
    deploy(&client, "stable", 1, SIM, &["--model", "m"], json!({})).await;
    deploy(&client, "canary", 1, SIM, &["--model", "m"], json!({})).await;
    deploy(&client, "exact", 1, SIM, &["--model", "m"], json!({})).await;
    for s in ["stable", "canary", "exact"] {
        apply(&client, service(s)).await;
    }
    // In one route the canary rules come second: first-rule-wins alone would miss them.
    // (One match per rule: the Gateway API's CEL rule allows a ReplacePrefixMatch rewrite
    // only on a rule with exactly one PathPrefix match.)
    let canary_header = json!([{"name": "x-modelplane-canary", "value": "true"}]);
    let mut with_header = prefix("/m");
    with_header["headers"] = canary_header.clone();
    let mut with_query = prefix("/m");
    with_query["queryParams"] = json!([{"name": "variant", "value": "b"}]);
    apply(
        &client,
        route(
            "models",
            json!([
                {"matches": [prefix("/m")], "backendRefs": [svc_ref("stable", 1)]},
                {"matches": [with_header], "backendRefs": [svc_ref("canary", 1)]},
                {"matches": [with_query], "backendRefs": [svc_ref("canary", 1)]},
            ]),
        ),
    )
    .await;
    // Across routes: a newer route's header match beats an older route's bare prefix,
    // and an Exact path beats any prefix, headers or not.
    apply(
        &client,
        route(
            "older",
            json!([{"matches": [prefix("/n")], "backendRefs": [svc_ref("stable", 1)]}]),
        ),
    )
    .await;
    let mut newer = prefix("/n");
    newer["headers"] = canary_header.clone();
    let mut exact = json!({"path": {"type": "Exact", "value": "/n/v1/models"}});
    exact["method"] = json!("GET");
    apply(
        &client,
        route(
            "newer",
            json!([{"matches": [newer], "backendRefs": [svc_ref("canary", 1)]}]),
        ),
    )
    .await;
    let mut exact_route = route(
        "exact",
        json!([{"matches": [exact], "backendRefs": [svc_ref("exact", 1)]}]),
    );
    exact_route["spec"]["rules"][0]["filters"] = json!([{"type": "URLRewrite",
        "urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/v1/models"}}}]);
    apply(&client, exact_route).await;
    ready(&client, "stable", 1).await;
    ready(&client, "canary", 1).await;
    ready(&client, "exact", 1).await;
    routed(addr, "/m/v1/models").await;
    routed(addr, "/n/health").await;
    wait_for("the exact route", || async {
        let r = http(addr, "GET", "/n/v1/models", &[], None).await;
        r.pod().starts_with("exact-").then_some(())
    })
    .await;
    // The newer route's header rule is routable once its status says Accepted.
    wait_for("the newer route", || async {
        let r = http(
            addr,
            "GET",
            "/n/health",
            &[("x-modelplane-canary", "true")],
            None,
        )
        .await;
        r.pod().starts_with("canary-").then_some(())
    })
    .await;

    // (path, request headers, the deployment that must answer)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("/m/v1/models", &[("x-modelplane-canary", "true")], "canary"),
        ("/m/v1/models", &[("X-Modelplane-Canary", "true")], "canary"),
        ("/m/v1/models", &[], "stable"),
        (
            "/m/v1/models",
            &[("x-modelplane-canary", "false")],
            "stable",
        ),
        // Values match exactly (case-sensitively).
        ("/m/v1/models", &[("x-modelplane-canary", "TRUE")], "stable"),
        ("/m/v1/models?variant=b", &[], "canary"),
        ("/m/v1/models?variant=a", &[], "stable"),
        ("/m/v1/models?other=1&variant=b", &[], "canary"),
        ("/n/health", &[("x-modelplane-canary", "true")], "canary"),
        ("/n/health", &[], "stable"),
        ("/n/v1/models", &[("x-modelplane-canary", "true")], "exact"),
    ];
    for (path, headers, want) in cases {
        for _ in 0..10 {
            let r = http(addr, "GET", path, headers, None).await;
            assert_eq!(r.status, 200, "{path} {headers:?}: {r:?}");
            assert!(
                r.pod().starts_with(&format!("{want}-")),
                "{path} {headers:?} went to {} instead of {want}",
                r.pod()
            );
        }
    }
    emu.shutdown().await;
}

// Precedence across routes by hostname, from the doc comment of HTTPRouteSpec.Hostnames
// in kubernetes-sigs/gateway-api apis/v1/httproute_types.go: "precedence must be given
// to rules from the HTTPRoute with the largest number of: * Characters in a matching
// non-wildcard hostname. * Characters in a matching hostname. If ties exist across
// multiple Routes, the matching precedence rules for HTTPRouteMatches takes over."
// "Implementations MUST ignore any port value specified in the HTTP Host header", and
// hosts compare case-insensitively. Project A's route has no hostnames, project B's has
// one, both on the path `/team-a/demo`: B's hostname goes to B although A's route is
// older and first by name; any other host goes to A.
#[tokio::test]
async fn hostnames_take_precedence_over_paths() {
    let (emu, client, addr) = start().await;
    deploy(&client, "team-a", 1, SIM, &["--model", "m"], json!({})).await;
    deploy(&client, "team-b", 1, SIM, &["--model", "m"], json!({})).await;
    for s in ["team-a", "team-b"] {
        apply(&client, service(s)).await;
    }
    let rule = |svc: &str| json!([{"matches": [prefix("/team-a/demo")], "backendRefs": [svc_ref(svc, 1)]}]);
    apply(&client, route("project-a", rule("team-a"))).await;
    let mut b = route("project-b", rule("team-b"));
    b["spec"]["hostnames"] = json!(["demo.b.example.com"]);
    apply(&client, b).await;
    ready(&client, "team-a", 1).await;
    ready(&client, "team-b", 1).await;
    routed(addr, "/team-a/demo/health").await;
    wait_for("project B's route", || async {
        let r = http(
            addr,
            "GET",
            "/team-a/demo/health",
            &[("Host", "demo.b.example.com")],
            None,
        )
        .await;
        r.pod().starts_with("team-b-").then_some(())
    })
    .await;

    // (Host header, the deployment that must answer)
    let cases = [
        ("demo.b.example.com", "team-b"),
        ("Demo.B.Example.COM:8080", "team-b"),
        ("127.0.0.1", "team-a"),
        ("other.example.com:80", "team-a"),
    ];
    for (host, want) in cases {
        let r = http(
            addr,
            "GET",
            "/team-a/demo/v1/models",
            &[("Host", host)],
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert!(
            r.pod().starts_with(&format!("{want}-")),
            "{host} went to {} instead of {want}",
            r.pod()
        );
    }
    emu.shutdown().await;
}

fn pool(name: &str, app_label: &str, epp: Option<Value>) -> Value {
    let mut p = json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"pool": app_label}}, "targetPorts": [{"number": 8000}]}});
    if let Some(e) = epp {
        p["spec"]["endpointPickerRef"] = e;
    }
    p
}

fn pool_ref(name: &str) -> Value {
    json!({"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": name})
}

fn chat() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hello there"}]})
}

/// Waits until a sim pod's `/metrics` (through the route `/<prefix>`) satisfies `ok`.
async fn wait_metrics(addr: SocketAddr, route: &str, what: &str, ok: impl Fn(&str) -> bool) {
    wait_for(what, || async {
        let r = http(addr, "GET", &format!("/{route}/metrics"), &[], None).await;
        assert_eq!(r.status, 200, "{r:?}");
        ok(&r.body).then_some(())
    })
    .await;
}

// The endpoint picker: the real one is the pool's EPP (an ext-proc service scoring pods
// by queue depth and KV cache); the emulator picks the ready pod with the fewest
// requests in flight. failureMode (EndpointPickerRef in kubernetes-sigs/
// gateway-api-inference-extension api/v1/inferencepool_types.go): FailClose "should drop
// the request" when the picker is unavailable, FailOpen "should forward the request to
// an endpoint of its picking" (conformance/tests/epp_unavailable_fail_open.go makes the
// picker unavailable by leaving its Service without endpoints).
#[tokio::test]
async fn inference_pools_send_requests_to_the_least_busy_pod() {
    let (emu, client, addr) = start().await;
    // Two model servers of one pool, each also reachable through its own Service; slow
    // enough (time to first token 1.5 s, in the milliseconds form of v0.5.1's flag) that
    // requests overlap, with room for all of them to run at once.
    let args = [
        "--model",
        "m",
        "--time-to-first-token",
        "1500",
        "--max-num-seqs",
        "16",
    ];
    deploy(&client, "pa", 1, SIM, &args, json!({"pool": "qwen"})).await;
    deploy(&client, "pb", 1, SIM, &args, json!({"pool": "qwen"})).await;
    // The endpoint picker's pods (no model server; only its readiness matters here).
    deploy(
        &client,
        "epp",
        1,
        "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0",
        &[],
        json!({}),
    )
    .await;
    for s in ["pa", "pb", "epp"] {
        apply(&client, service(s)).await;
    }
    let mut idle_epp = service("idle-epp");
    idle_epp["spec"]["selector"] = json!({"app": "no-such-pods"});
    apply(&client, idle_epp).await;
    let epp =
        |svc: &str, mode: &str| json!({"name": svc, "port": {"number": 9002}, "failureMode": mode});
    apply(&client, pool("qwen", "qwen", Some(epp("epp", "FailClose")))).await;
    apply(
        &client,
        pool("closed", "qwen", Some(epp("idle-epp", "FailClose"))),
    )
    .await;
    apply(
        &client,
        pool("open", "qwen", Some(epp("idle-epp", "FailOpen"))),
    )
    .await;
    apply(
        &client,
        route(
            "pools",
            json!([
                {"matches": [prefix("/pool")], "backendRefs": [pool_ref("qwen")]},
                {"matches": [prefix("/closed")], "backendRefs": [pool_ref("closed")]},
                {"matches": [prefix("/open")], "backendRefs": [pool_ref("open")]},
                {"matches": [prefix("/pa")], "backendRefs": [svc_ref("pa", 1)]},
                {"matches": [prefix("/pb")], "backendRefs": [svc_ref("pb", 1)]},
            ]),
        ),
    )
    .await;
    ready(&client, "pa", 1).await;
    ready(&client, "pb", 1).await;
    ready(&client, "epp", 1).await;
    routed(addr, "/pool/health").await;

    // Pod a is busy with 3 requests sent to it directly.
    let mut direct = Vec::new();
    for _ in 0..3 {
        direct.push(tokio::spawn(async move {
            http(addr, "POST", "/pa/v1/chat/completions", &[], Some(chat())).await
        }));
    }
    let running = |n: f64| move |b: &str| metric(b, "vllm:num_requests_running") == Some(n);
    wait_metrics(addr, "pa", "3 requests running on pod a", running(3.0)).await;
    // 4 requests to the pool: the first 3 go to idle pod b, the 4th to either (a tie).
    let mut pooled = Vec::new();
    for _ in 0..4 {
        pooled.push(tokio::spawn(async move {
            http(addr, "POST", "/pool/v1/chat/completions", &[], Some(chat())).await
        }));
    }
    // In flight ends up balanced: 3 and 4, or 4 and 3, while all 7 run.
    let (a, b) = wait_for("7 requests running", || async {
        let get = |r: &'static str| async move {
            let body = http(addr, "GET", &format!("/{r}/metrics"), &[], None)
                .await
                .body;
            metric(&body, "vllm:num_requests_running").unwrap()
        };
        let (a, b) = (get("pa").await, get("pb").await);
        (a + b == 7.0).then_some((a, b))
    })
    .await;
    assert!((a - b).abs() <= 1.0, "running on a: {a}, on b: {b}");
    let mut to_b = 0;
    for t in pooled {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        to_b += usize::from(r.pod().starts_with("pb-"));
    }
    assert!(
        to_b >= 3,
        "only {to_b} of 4 pooled requests went to the idle pod"
    );
    for t in direct {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.pod().starts_with("pa-"), "{r:?}");
    }

    // The picker's Service has no ready endpoints: FailClose drops, FailOpen forwards.
    let r = http(addr, "GET", "/closed/health", &[], None).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.body.contains("FailClose"), "{}", r.body);
    assert!(r.body.contains("idle-epp"), "{}", r.body);
    assert_eq!(r.pod(), "");
    let r = http(addr, "GET", "/open/health", &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.pod().starts_with("pa-") || r.pod().starts_with("pb-"),
        "{r:?}"
    );
    emu.shutdown().await;
}

/// Our entry in the pool's `status.parents`, once it satisfies `ok`.
async fn pool_parent(client: &Client, pool: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("status of InferencePool {pool}"), || async {
        let p = get(client, "InferencePool", pool).await;
        let parents = p.pointer("/status/parents").cloned().unwrap_or(json!([]));
        ok(&parents).then_some(parents)
    })
    .await
}

fn cond<'a>(parent: &'a Value, ty: &str) -> (&'a str, &'a str, i64) {
    let c = parent["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == ty)
        .unwrap();
    (
        c["status"].as_str().unwrap(),
        c["reason"].as_str().unwrap(),
        c["observedGeneration"].as_i64().unwrap(),
    )
}

// InferencePool status (InferencePoolStatus and the condition reasons in
// kubernetes-sigs/gateway-api-inference-extension api/v1/inferencepool_types.go): one
// parent entry per Gateway, removed "when the controller no longer considers the
// InferencePool to be associated with that parent"; Accepted True with the reason
// "Accepted" (InferencePoolReasonAccepted; conformance/utils/kubernetes/helpers.go
// InferencePoolMustBeAcceptedByParent expects it); ResolvedRefs False with
// "InvalidExtensionRef" for an endpointPickerRef that cannot be found. An HTTPRoute
// naming a missing pool has ResolvedRefs False, BackendNotFound
// (conformance/tests/httproute_invalid_inferencepool_ref.go).
#[tokio::test]
async fn inference_pool_status_follows_the_routes() {
    let (emu, client, _) = start().await;
    apply(&client, service("epp")).await;
    apply(
        &client,
        pool(
            "qwen",
            "qwen",
            Some(json!({"name": "epp", "port": {"number": 9002}})),
        ),
    )
    .await;
    apply(
        &client,
        pool(
            "broken",
            "qwen",
            Some(json!({"name": "missing-epp", "port": {"number": 9002}})),
        ),
    )
    .await;
    apply(&client, pool("unused", "qwen", None)).await;
    apply(
        &client,
        route(
            "to-pools",
            json!([
                {"matches": [prefix("/a")], "backendRefs": [pool_ref("qwen")]},
                {"matches": [prefix("/b")], "backendRefs": [pool_ref("broken")]},
            ]),
        ),
    )
    .await;
    let parents = pool_parent(&client, "qwen", |p| !p.as_array().unwrap().is_empty()).await;
    assert_eq!(parents.as_array().unwrap().len(), 1, "{parents}");
    let p = &parents[0];
    assert_eq!(
        p["parentRef"],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateway-system", "name": "public"})
    );
    assert_eq!(p["controllerName"], modelplane_emulator::GATEWAY_CONTROLLER);
    assert_eq!(cond(p, "Accepted"), ("True", "Accepted", 1));
    assert_eq!(cond(p, "ResolvedRefs"), ("True", "ResolvedRefs", 1));
    let parents = pool_parent(&client, "broken", |p| !p.as_array().unwrap().is_empty()).await;
    assert_eq!(cond(&parents[0], "Accepted"), ("True", "Accepted", 1));
    assert_eq!(
        cond(&parents[0], "ResolvedRefs"),
        ("False", "InvalidExtensionRef", 1)
    );
    // The picker's Service appears: the reference resolves.
    apply(&client, service("missing-epp")).await;
    pool_parent(&client, "broken", |p| {
        p.get(0)
            .is_some_and(|p| cond(p, "ResolvedRefs") == ("True", "ResolvedRefs", 1))
    })
    .await;
    let unused = get(&client, "InferencePool", "unused").await;
    assert_eq!(unused.pointer("/status/parents"), None, "{unused}");

    // A route naming a pool that does not exist.
    apply(
        &client,
        route(
            "dangling",
            json!([{"matches": [prefix("/c")], "backendRefs": [pool_ref("nope")]}]),
        ),
    )
    .await;
    let r = wait_for("status of route dangling", || async {
        let r = get(&client, "HTTPRoute", "dangling").await;
        r.pointer("/status/parents/0").cloned()
    })
    .await;
    assert_eq!(cond(&r, "Accepted"), ("True", "Accepted", 1));
    assert_eq!(cond(&r, "ResolvedRefs"), ("False", "BackendNotFound", 1));

    // Nothing changes: the status is not rewritten.
    let before = get(&client, "InferencePool", "qwen").await["metadata"]["resourceVersion"].clone();
    let route_rv =
        get(&client, "HTTPRoute", "to-pools").await["metadata"]["resourceVersion"].clone();
    // Changes elsewhere make the Gateway controller run again: once the second Service's
    // EndpointSlice exists, the pass that made the first one's has run to its end.
    for svc in ["unrelated", "unrelated-2"] {
        apply(&client, service(svc)).await;
        wait_for(&format!("the EndpointSlice of {svc}"), || async {
            let slices = Api::<kube::api::DynamicObject>::namespaced_with(
                client.clone(),
                "default",
                &kube::api::ApiResource::from_gvk_with_plural(
                    &kube::api::GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
                    "endpointslices",
                ),
            );
            let l = slices
                .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}")))
                .await
                .unwrap();
            (!l.items.is_empty()).then_some(())
        })
        .await;
    }
    assert_eq!(
        get(&client, "InferencePool", "qwen").await["metadata"]["resourceVersion"],
        before
    );
    assert_eq!(
        get(&client, "HTTPRoute", "to-pools").await["metadata"]["resourceVersion"],
        route_rv
    );

    // The route goes away: so do our parent entries.
    api(&client, "HTTPRoute", "default")
        .delete("to-pools", &DeleteParams::default())
        .await
        .unwrap();
    pool_parent(&client, "qwen", |p| p.as_array().unwrap().is_empty()).await;
    pool_parent(&client, "broken", |p| p.as_array().unwrap().is_empty()).await;
    emu.shutdown().await;
}

// llm-d-inference-sim's latency and concurrency flags (docs/configuration.md and
// pkg/common/config.go in github.com/llm-d/llm-d-inference-sim): `--time-to-first-token`
// and `--inter-token-latency` (milliseconds in v0.5.1, Go durations such as `100ms`
// since v0.7.0), `--max-num-seqs` (requests processed at once, default 5; more wait);
// its `/metrics` (docs/metrics.md): vllm:num_requests_running, vllm:num_requests_waiting
// and vllm:kv_cache_usage_perc, labelled model_name.
#[tokio::test]
async fn sim_metrics_follow_the_load() {
    let (emu, client, addr) = start().await;
    let args = [
        "--model",
        "qwen-small",
        "--time-to-first-token=1s",
        "--inter-token-latency",
        "50ms",
        "--max-num-seqs",
        "2",
    ];
    deploy(&client, "slow", 1, SIM, &args, json!({})).await;
    apply(&client, service("slow")).await;
    apply(
        &client,
        route(
            "slow",
            json!([{"matches": [prefix("/slow")], "backendRefs": [svc_ref("slow", 1)]}]),
        ),
    )
    .await;
    ready(&client, "slow", 1).await;
    routed(addr, "/slow/metrics").await;
    let r = http(addr, "GET", "/slow/metrics", &[], None).await;
    assert!(r.headers["content-type"].starts_with("text/plain"), "{r:?}");
    assert!(r.pod().starts_with("slow-"), "{r:?}");
    assert!(
        r.body
            .contains("vllm:num_requests_running{model_name=\"qwen-small\"} 0\n"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("# TYPE vllm:num_requests_waiting gauge"),
        "{}",
        r.body
    );
    assert_eq!(metric(&r.body, "vllm:kv_cache_usage_perc"), Some(0.0));

    // 3 requests (one streamed, of 3 tokens): 2 run, 1 waits for a slot.
    let mut tasks = Vec::new();
    let started = tokio::time::Instant::now();
    for i in 0..3 {
        let mut body = json!({"model": "qwen-small", "messages": [{"role": "user", "content": "one two three"}]});
        if i == 0 {
            body["stream"] = json!(true);
        }
        tasks.push(tokio::spawn(async move {
            http(addr, "POST", "/slow/v1/chat/completions", &[], Some(body)).await
        }));
    }
    wait_metrics(addr, "slow", "2 running and 1 waiting", |b| {
        metric(b, "vllm:num_requests_running") == Some(2.0)
            && metric(b, "vllm:num_requests_waiting") == Some(1.0)
            && metric(b, "vllm:kv_cache_usage_perc") == Some(1.0)
            && metric(b, "vllm:gpu_cache_usage_perc") == Some(1.0)
    })
    .await;
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.body.contains("three"), "{}", r.body);
    }
    // One second to the first token and two 50 ms gaps, twice over for the request that
    // waited for a slot.
    assert!(
        started.elapsed() >= Duration::from_millis(2 * 1100),
        "{:?}",
        started.elapsed()
    );
    wait_metrics(addr, "slow", "an idle pod", |b| {
        metric(b, "vllm:num_requests_running") == Some(0.0)
            && metric(b, "vllm:num_requests_waiting") == Some(0.0)
    })
    .await;
    emu.shutdown().await;
}

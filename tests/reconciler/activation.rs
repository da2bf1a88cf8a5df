//! Scale from zero through the activator, on the emulator, through the Gateway URL: the
//! route of a deployment at zero goes to a Service without a selector whose EndpointSlice
//! names the API's activator (this machine's address: Kubernetes refuses loopback in a
//! slice), the emulator's Gateway really connects there (`emulator/src/cluster/external.rs`,
//! Kubernetes' "Services without selectors"), and the activator holds each request until a
//! replica is available.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::load::cluster;
use super::{Harness, create_with, harness_with, sim_spec, wait_for};

/// A sim at zero replicas that may scale to zero, answering 200 ms after a request's first
/// token is due.
fn at_zero(activation_timeout: i64) -> Value {
    let mut spec = sim_spec();
    spec["resources"] = json!({"cpu": "100m", "memory": "256Mi"});
    spec["replicas"] = json!(0);
    spec["engine"]["args"] = json!(["--time-to-first-token=50ms", "--inter-token-latency=10ms"]);
    spec["autoscaling"] = json!({
        "minReplicas": 0,
        "maxReplicas": 2,
        "target": {"metric": "waitingPerReplica", "value": 4},
        "activationTimeoutSeconds": activation_timeout,
    });
    spec
}

/// The deployment's OpenAI base URL once it is at zero and advertises it.
async fn base_at_zero(h: &Harness, name: &str) -> String {
    wait_for(
        &format!("{name} at zero with its URL"),
        Duration::from_secs(30),
        || async {
            let d = h.deployment(name).await;
            d["status"]["phase"] == "ScaledToZero"
                && d["status"]["endpoints"]["openaiBase"].is_string()
        },
    )
    .await;
    let d = h.deployment(name).await;
    assert_eq!(
        d["status"]["endpoints"]["reason"],
        "scaled to zero: activates on first request (it waits while a replica starts)"
    );
    assert!(d["status"]["endpoints"]["cluster"].is_null(), "{d}");
    d["status"]["endpoints"]["openaiBase"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn route_backend(h: &Harness, name: &str) -> String {
    let routes: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &super::resource_of("gateway.networking.k8s.io/v1", "HTTPRoute"),
    );
    let route = routes.get(name).await.unwrap();
    route.data["spec"]["rules"][0]["backendRefs"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// At zero, 100 concurrent requests all get the model's answer (none fails), one of them
/// streamed token by token; the deployment is scaled up exactly once, and once a replica
/// is available the route goes straight to the model's Service again.
#[sqlx::test]
async fn requests_at_zero_wait_for_one_scale_up_and_all_get_answers(pool: PgPool) {
    let h = harness_with(pool, cluster(), |_| {}, |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "idle", at_zero(60)).await;
    let base = base_at_zero(&h, "idle").await;
    assert_eq!(route_backend(&h, "idle").await, "idle-activator");
    assert_eq!(
        h.deployment("idle").await["status"]["replicas"]["desired"],
        0
    );

    let id = h.deployment("idle").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // What the activators hear from the worker (see the last assertions).
    let mut announcements = modelplane::store::changes::listen_on(
        &h.pool,
        modelplane::store::autoscaling::SERVING_CHANNEL,
    )
    .await
    .unwrap();

    let http = reqwest::Client::new();
    let completions = (0..100).map(|i| {
        let http = http.clone();
        let url = format!("{base}/completions");
        async move {
            let response = http
                .post(url)
                .json(&json!({"model": "idle", "prompt": format!("request {i}"), "max_tokens": 2}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    });
    let streamed = async {
        let mut response = http
            .post(format!("{base}/chat/completions"))
            .json(&json!({"model": "idle", "stream": true, "max_tokens": 3,
                          "messages": [{"role": "user", "content": "one two three"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
        let mut chunks = Vec::new();
        while let Some(chunk) = response.chunk().await.unwrap() {
            chunks.push(String::from_utf8(chunk.to_vec()).unwrap());
        }
        chunks
    };
    let (answers, chunks) = tokio::join!(join_all(completions), streamed);
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["model"], "idle", "{body}");
        assert_eq!(
            body["choices"][0]["text"].as_str().map(str::is_empty),
            Some(false),
            "{body}"
        );
    }
    // Server-sent events, each token its own, then the end.
    let text = chunks.concat();
    assert!(text.matches("data: {").count() >= 3, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    let ups = h.timeline("idle", "Autoscaled").await;
    assert_eq!(ups, vec!["0 → 1: a request arrived while scaled to zero"]);
    // The worker told the activators when the Service's first endpoint was ready.
    let heard = announcements.recv().await.unwrap();
    assert_eq!(heard.payload(), id);
    let status = h.deployment("idle").await["status"].clone();
    assert_eq!(status["autoscaling"]["replicas"], 1, "{status}");
    assert_eq!(status["autoscaling"]["lastScaled"]["from"], 0);

    // The replica serves: the route goes to the model's Service, not the activator.
    wait_for(
        "the route back on the Service",
        Duration::from_secs(20),
        || async { route_backend(&h, "idle").await == "idle" },
    )
    .await;
    let direct = http
        .post(format!("{base}/completions"))
        .json(&json!({"model": "idle", "prompt": "again", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    assert!(direct.headers().contains_key("x-emulator-pod"));
    assert_eq!(h.timeline("idle", "Autoscaled").await.len(), 1);
    // The route moving between the activator and the Service is modelplane's own doing,
    // never told as drift repaired.
    assert_eq!(
        h.timeline("idle", "DriftRepaired").await,
        Vec::<String>::new()
    );
}

/// A deployment whose replica cannot start (no node has the CPU it asks for): past the
/// per-deployment cap of held requests the activator answers 429 at once, and the held
/// ones get 503 with Retry-After when `activationTimeoutSeconds` passes.
#[sqlx::test]
async fn past_the_cap_429_and_past_the_timeout_503(pool: PgPool) {
    let h = harness_with(pool, cluster(), |_| {}, |o| o.activator_max_held = 2).await;
    h.app.create_project("team-a").await;
    let mut spec = at_zero(3);
    spec["resources"] = json!({"cpu": "500", "memory": "256Mi"});
    create_with(&h, "huge", spec).await;
    let base = base_at_zero(&h, "huge").await;

    let send = |prompt: &'static str| {
        let url = format!("{base}/completions");
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(url)
                .json(&json!({"model": "huge", "prompt": prompt, "max_tokens": 1}))
                .send()
                .await
                .unwrap();
            let retry = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            (
                response.status().as_u16(),
                retry,
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    let held = [send("a"), send("b")];
    let metrics = format!("{}/metrics", h.app.base);
    wait_for("2 requests held", Duration::from_secs(10), || async {
        let page = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        modelplane_testkit::server::sample(&page, "modelplane_activator_held_requests", &[])
            == Some(2.0)
    })
    .await;
    let (status, retry, body) = send("c").await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry.as_deref(), Some("1"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2 requests already wait for it"),
        "{body}"
    );
    for request in held {
        let (status, retry, body) = request.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(retry.as_deref(), Some("10"));
        assert_eq!(
            body["error"]["message"],
            "deployment `huge` did not start a replica within 3 s (spec.autoscaling.activationTimeoutSeconds)"
        );
    }
    // One scale-up for all of them.
    assert_eq!(h.timeline("huge", "Autoscaled").await.len(), 1);
}

/// The whole cycle as a user sees it: a deployment that starts with a replica, left idle,
/// is taken to zero by the autoscaler after `scaleToZeroAfterSeconds` (its route moved to
/// the activator before the pod goes), and its next request wakes it: one answer, one
/// scale-up, each step on the timeline in a sentence.
#[sqlx::test]
async fn an_idle_deployment_goes_to_zero_and_its_next_request_wakes_it(pool: PgPool) {
    let h = harness_with(pool, cluster(), |_| {}, |_| {}).await;
    h.app.create_project("team-a").await;
    h.collect_load();
    let mut spec = at_zero(60);
    spec["replicas"] = json!(1);
    spec["autoscaling"]["scaleToZeroAfterSeconds"] = json!(30);
    create_with(&h, "idle", spec).await;
    let (base, model) = super::load::openai(&super::load::ready(&h, "idle").await).await;
    assert_eq!(route_backend(&h, "idle").await, "idle");

    // 30 s without a request, then the next decision.
    wait_for("scaled to zero", Duration::from_secs(90), || async {
        h.deployment("idle").await["status"]["phase"] == "ScaledToZero"
    })
    .await;
    let downs = h.timeline("idle", "Autoscaled").await;
    assert_eq!(downs.len(), 1, "{downs:?}");
    assert!(downs[0].starts_with("1 → 0: no request for "), "{downs:?}");
    assert!(
        downs[0].ends_with("(scaleToZeroAfterSeconds 30)"),
        "{downs:?}"
    );
    assert_eq!(route_backend(&h, "idle").await, "idle-activator");
    assert_eq!(base_at_zero(&h, "idle").await, base);

    let answer = reqwest::Client::new()
        .post(format!("{base}/completions"))
        .json(&json!({"model": model, "prompt": "wake up", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let ups = h.timeline("idle", "Autoscaled").await;
    assert_eq!(ups.len(), 2, "{ups:?}");
    assert_eq!(ups[1], "0 → 1: a request arrived while scaled to zero");
    assert_eq!(
        h.timeline("idle", "DriftRepaired").await,
        Vec::<String>::new()
    );
}

/// Two API processes (two activators, each with its own change feed) holding requests for
/// the same deployment at zero: both wake it, and it is scaled up exactly once.
#[sqlx::test]
async fn activators_in_two_processes_scale_it_up_once(pool: PgPool) {
    use modelplane::service::activation::Activator;
    use modelplane::service::live::ChangeHub;

    let h = harness_with(pool, cluster(), |_| {}, |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "idle", at_zero(60)).await;
    base_at_zero(&h, "idle").await;
    let id: uuid::Uuid = h.deployment("idle").await["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut processes = Vec::new();
    for _ in 0..2 {
        // Each process has its own database pool, as `serve` does.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect_with((*h.pool.connect_options()).clone())
            .await
            .unwrap();
        let hub = ChangeHub::start(pool.clone(), h.shutdown.clone())
            .await
            .unwrap();
        processes.push(Activator::new(pool, hub, 100));
    }
    let wakes = processes
        .iter()
        .flat_map(|a| (0..10).map(move |_| a.wake(id)));
    for woken in join_all(wakes).await {
        let woken = woken.unwrap();
        assert_eq!(
            (woken.name.as_str(), woken.namespace.as_str()),
            ("idle", "team-a")
        );
    }
    assert_eq!(
        h.timeline("idle", "Autoscaled").await,
        vec!["0 → 1: a request arrived while scaled to zero"]
    );
    assert!(processes.iter().all(|a| a.held() == 0));
}

/// A held request goes on as soon as a worker says the deployment's Service has a ready
/// endpoint, before any status says a replica is available (here none ever does: no node
/// has the CPU its replica asks for); word about another deployment does not move it.
#[sqlx::test]
async fn a_ready_endpoint_announced_sends_held_requests_on(pool: PgPool) {
    use modelplane::service::activation::Activator;
    use modelplane::store::autoscaling::announce_serving;

    let h = harness_with(pool, cluster(), |_| {}, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = at_zero(120);
    spec["resources"] = json!({"cpu": "500", "memory": "256Mi"});
    create_with(&h, "huge", spec).await;
    base_at_zero(&h, "huge").await;
    let id: uuid::Uuid = h.deployment("huge").await["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let hub = modelplane::service::live::ChangeHub::start(h.pool.clone(), h.shutdown.clone())
        .await
        .unwrap();
    let activator = Activator::new(h.pool.clone(), hub, 100);
    let waiting = tokio::spawn({
        let activator = activator.clone();
        async move { activator.wake(id).await.map(|w| w.name) }
    });
    wait_for("the request held", Duration::from_secs(20), || async {
        activator.held() == 1
    })
    .await;
    // The scale-up from zero is written before the wait; another deployment's word is not
    // this one's.
    wait_for("the scale-up", Duration::from_secs(20), || async {
        h.timeline("huge", "Autoscaled").await.len() == 1
    })
    .await;
    announce_serving(&h.pool, uuid::Uuid::new_v4())
        .await
        .unwrap();
    assert!(!waiting.is_finished());
    assert_eq!(
        h.deployment("huge").await["status"]["replicas"]["available"],
        0
    );
    announce_serving(&h.pool, id).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the announcement sends the held request on")
        .unwrap();
    assert_eq!(woken.unwrap(), "huge");
}

/// A client that goes away while its request is held stops waiting: the request is dropped
/// (the Gateway closes its upstream connection, as Envoy resets it), never forwarded later.
#[sqlx::test]
async fn a_client_that_goes_away_is_no_longer_held(pool: PgPool) {
    let h = harness_with(pool, cluster(), |_| {}, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = at_zero(120);
    // No node has this much CPU: the replica never starts, so the request would wait on.
    spec["resources"] = json!({"cpu": "500", "memory": "256Mi"});
    create_with(&h, "huge", spec).await;
    let base = base_at_zero(&h, "huge").await;
    let metrics = format!("{}/metrics", h.app.base);
    let held = || async {
        let page = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        modelplane_testkit::server::sample(&page, "modelplane_activator_held_requests", &[])
    };
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let gave_up = tokio::spawn(async move {
        impatient
            .post(format!("{base}/completions"))
            .json(&json!({"model": "huge", "prompt": "anyone?", "max_tokens": 1}))
            .send()
            .await
    });
    wait_for("the request held", Duration::from_secs(10), || async {
        held().await == Some(1.0)
    })
    .await;
    assert!(gave_up.await.unwrap().unwrap_err().is_timeout());
    wait_for("the request let go", Duration::from_secs(10), || async {
        held().await == Some(0.0)
    })
    .await;
}

/// In a cluster the activator runs on the API pods, behind the chart's `<release>-activator`
/// Service: the worker names that Service's ready endpoints (and the activator's port) in
/// each deployment's activator EndpointSlice, and follows them when the API pods move.
#[sqlx::test]
async fn activator_slices_follow_the_api_pods(pool: PgPool) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use modelplane::reconciler::worker::ActivatorService;

    let service = ActivatorService {
        namespace: "modelplane-system".into(),
        name: "modelplane-activator".into(),
        port: 8081,
    };
    let h = harness_with(
        pool,
        cluster(),
        |c| c.activator_service = Some(service),
        |_| {},
    )
    .await;
    let apply = |api_version: &'static str,
                 kind: &'static str,
                 namespace: Option<&'static str>,
                 object: Value| {
        let resource = super::resource_of(api_version, kind);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(h.kube.clone(), ns, &resource),
            None => Api::all_with(h.kube.clone(), &resource),
        };
        async move {
            let name = object["metadata"]["name"].as_str().unwrap().to_owned();
            api.patch(
                &name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&object),
            )
            .await
            .unwrap();
        }
    };
    // The chart's namespace, and its activator Service's endpoints: two API pods, one of
    // them not ready (as the EndpointSlice controller keeps them).
    let api_pods = |ready: &str, unready: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "modelplane-activator-abcde",
                            "labels": {"kubernetes.io/service-name": "modelplane-activator"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [ready], "conditions": {"ready": true}},
                             {"addresses": [unready], "conditions": {"ready": false}}],
               "ports": [{"name": "activator", "port": 8081, "protocol": "TCP"}]})
    };
    apply(
        "v1",
        "Namespace",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "modelplane-system"}}),
    )
    .await;
    apply(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        Some("modelplane-system"),
        api_pods("10.1.2.3", "10.1.2.9"),
    )
    .await;
    h.app.create_project("team-a").await;
    create_with(&h, "idle", at_zero(60)).await;
    let slices: Api<DynamicObject> = Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &super::resource_of("discovery.k8s.io/v1", "EndpointSlice"),
    );
    let names = |want: &'static str| {
        let slices = slices.clone();
        async move {
            let Some(slice) = slices.get_opt("idle-activator").await.unwrap() else {
                return false;
            };
            let addresses: Vec<&str> = slice.data["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            addresses == [want] && slice.data["ports"][0]["port"] == 8081
        }
    };
    wait_for(
        "the activator slice naming the ready API pod",
        Duration::from_secs(20),
        || names("10.1.2.3"),
    )
    .await;
    // The API pods rolled: the slice follows.
    apply(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        Some("modelplane-system"),
        api_pods("10.1.2.4", "10.1.2.3"),
    )
    .await;
    wait_for(
        "the activator slice following the API pods",
        Duration::from_secs(20),
        || names("10.1.2.4"),
    )
    .await;
}

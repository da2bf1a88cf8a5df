//! InferencePool mode on the emulator: the pool and its endpoint picker are made and
//! valid, requests are answered and spread to the least busy pod (the emulator's data plane
//! simulates the picker: see emulator/README.md), a switch back to Service mode leaves
//! nothing of the mode behind, and a cluster without the CRD is handled as the spec chose.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, resource_of, sim_spec, wait_for};

const PICKER_OBJECTS: [(&str, &str); 6] = [
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
];

/// The picker's ClusterRoleBinding (cluster-scoped, so not under the namespace).
async fn cluster_binding(h: &Harness) -> Option<kube::api::DynamicObject> {
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        h.kube.clone(),
        &resource_of("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    );
    api.get_opt("modelplane:epp:team-a:qwen").await.unwrap()
}

fn cluster(inference_api: bool) -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(100))
        .inference_api(inference_api)
        .gateway("gateway-system", "inference")
}

fn pooled_spec(replicas: i64) -> Value {
    let mut spec = sim_spec();
    spec["replicas"] = json!(replicas);
    // Slow answers, so concurrent requests overlap and the picker has a choice to make.
    spec["engine"]["args"] = json!(["--time-to-first-token=400"]);
    spec["routing"] = json!({"mode": "InferencePool"});
    spec
}

async fn condition(h: &Harness, name: &str, type_: &str) -> Value {
    let record = h.deployment(name).await;
    record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

#[sqlx::test]
async fn inference_pool_mode_routes_through_the_pool_and_a_switch_back_leaves_nothing(
    pool: PgPool,
) {
    let h = harness_on(pool, cluster(true), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", pooled_spec(2)).await;
    wait_for(
        "Ready through the pool",
        Duration::from_secs(30),
        || async { h.deployment("qwen").await["status"]["phase"] == "Ready" },
    )
    .await;
    let inference = condition(&h, "qwen", "InferencePool").await;
    assert_eq!(inference["status"], "True", "{inference}");
    let routed = condition(&h, "qwen", "Routed").await;
    assert!(
        routed["message"]
            .as_str()
            .unwrap()
            .contains("through its InferencePool"),
        "{routed}"
    );

    // The pool selects the model server pods on their port and names its picker; the
    // route's backend is the pool; the Gateway accepted it.
    let pool = h
        .live("inference.networking.k8s.io/v1", "InferencePool", "qwen")
        .await
        .unwrap();
    assert_eq!(pool["spec"]["targetPorts"], json!([{"number": 8000}]));
    assert_eq!(
        pool["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "qwen"
    );
    assert_eq!(pool["spec"]["endpointPickerRef"]["name"], "qwen-epp");
    assert_eq!(pool["spec"]["endpointPickerRef"]["port"]["number"], 9002);
    let parent = &pool["status"]["parents"][0];
    assert_eq!(parent["parentRef"]["name"], "inference");
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"],
        json!([{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen", "weight": 1}])
    );
    for (api_version, kind) in PICKER_OBJECTS {
        assert!(
            h.live(api_version, kind, "qwen-epp").await.is_some(),
            "{kind} qwen-epp"
        );
    }
    let config = h.live("v1", "ConfigMap", "qwen-epp").await.unwrap();
    let scorers = config["data"]["epp.yaml"].as_str().unwrap();
    for plugin in [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
    ] {
        assert!(scorers.contains(plugin), "{scorers}");
    }
    let role = h
        .live("rbac.authorization.k8s.io/v1", "Role", "qwen-epp")
        .await
        .unwrap();
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
    );
    // The picker's metrics endpoint checks scrapers with TokenReviews and
    // SubjectAccessReviews (the picker chart's `_rbac.yaml`): a cluster-wide binding.
    let binding = cluster_binding(&h).await.unwrap();
    assert_eq!(
        binding.data["roleRef"]["name"],
        "modelplane:endpoint-picker-metrics-auth"
    );

    // Eight concurrent slow requests: the least-busy picker spreads them over both pods.
    let url = h.deployment("qwen").await["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let client = reqwest::Client::new();
    let requests = (0..8).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let response = client
                .post(format!("{url}/v1/chat/completions"))
                .json(&json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.headers()["x-emulator-pod"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    });
    let pods = futures::future::join_all(requests).await;
    let first = pods.iter().filter(|p| **p == pods[0]).count();
    assert!(
        (3..=5).contains(&first),
        "the picker should spread 8 overlapping requests over 2 pods: {pods:?}"
    );

    // Back to Service mode: nothing of the pool mode is left.
    let switched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"routing": {"mode": "Service"}}}),
            None,
        )
        .await;
    assert_eq!(switched.status(), StatusCode::OK);
    wait_for(
        "the pool's objects gone",
        Duration::from_secs(30),
        || async {
            if h.live("inference.networking.k8s.io/v1", "InferencePool", "qwen")
                .await
                .is_some()
            {
                return false;
            }
            for (api_version, kind) in PICKER_OBJECTS {
                if h.live(api_version, kind, "qwen-epp").await.is_some() {
                    return false;
                }
            }
            cluster_binding(&h).await.is_none()
        },
    )
    .await;
    wait_for(
        "Ready through the Service",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["phase"] == "Ready" && r["status"]["observedGeneration"] == 2
        },
    )
    .await;
    assert!(condition(&h, "qwen", "InferencePool").await.is_null());
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0]["kind"],
        "Service"
    );
    let answer = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(
        h.events("qwen")
            .await
            .iter()
            .any(|e| e == "InferencePoolRemoved")
    );
}

#[sqlx::test]
async fn without_the_inference_pool_crd_the_spec_decides_fail_or_service(pool: PgPool) {
    let h = harness_on(pool, cluster(false), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", pooled_spec(1)).await;
    wait_for(
        "the pool reported unavailable",
        Duration::from_secs(30),
        || async {
            condition(&h, "qwen", "InferencePool").await["reason"] == "Unavailable"
                && h.deployment("qwen").await["status"]["replicas"]["available"] == 1
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    let routed = condition(&h, "qwen", "Routed").await;
    assert_eq!(routed["status"], "False");
    assert!(
        routed["message"]
            .as_str()
            .unwrap()
            .contains("whenUnavailable is Fail"),
        "{routed}"
    );
    assert_eq!(record["status"]["phase"], "Degraded", "{record}");
    assert!(
        record["status"]["endpoints"]["external"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Nothing of the mode was made: no picker, and no route.
    for (api_version, kind) in PICKER_OBJECTS {
        assert!(
            h.live(api_version, kind, "qwen-epp").await.is_none(),
            "{kind}"
        );
    }
    assert!(
        h.live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
            .await
            .is_none()
    );

    // The user allows the fallback: routed through the Service, and said so.
    let patched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"routing": {"inferencePool": {"whenUnavailable": "Service"}}}}),
            None,
        )
        .await;
    assert_eq!(patched.status(), StatusCode::OK);
    wait_for(
        "Ready through the Service",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["phase"] == "Ready" && r["status"]["observedGeneration"] == 2
        },
    )
    .await;
    let inference = condition(&h, "qwen", "InferencePool").await;
    assert_eq!(inference["status"], "False");
    assert!(
        inference["message"]
            .as_str()
            .unwrap()
            .contains("routed through the Service"),
        "{inference}"
    );
    let url = h.deployment("qwen").await["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
}

/// Switching a deployment that serves through its Service to InferencePool mode, with
/// requests flowing: the route moves to the pool only once the endpoint picker has an
/// available replica (the Gateway fails requests to a pool whose picker has no ready
/// endpoint: the inference extension's `failureMode: FailClose`, which the emulator's data
/// plane follows), so none fails. The picker's pods take 1.5 s to become ready here, a
/// window in which the old behaviour lost every request.
#[sqlx::test]
async fn switching_a_live_deployment_to_the_pool_fails_no_request(pool: PgPool) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let slow_start = super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(1500))
        .inference_api(true)
        .gateway("gateway-system", "inference");
    let h = harness_on(pool, slow_start, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["replicas"] = json!(2);
    create_with(&h, "qwen", spec).await;
    wait_for(
        "Ready through the Service",
        Duration::from_secs(30),
        || async { h.deployment("qwen").await["status"]["phase"] == "Ready" },
    )
    .await;
    let url = h.deployment("qwen").await["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = tokio::spawn({
        let (stop, sent, failed, url) = (stop.clone(), sent.clone(), failed.clone(), url.clone());
        async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let response = client
                    .post(format!("{url}/v1/chat/completions"))
                    .json(
                        &json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}),
                    )
                    .send()
                    .await
                    .unwrap();
                sent.fetch_add(1, Ordering::Relaxed);
                if response.status() != StatusCode::OK {
                    let status = response.status();
                    eprintln!(
                        "failed during the switch: {status}: {}",
                        response.text().await.unwrap_or_default()
                    );
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let switched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"routing": {"mode": "InferencePool"}}}),
            None,
        )
        .await;
    assert_eq!(switched.status(), StatusCode::OK);
    // While the picker starts, the status says the route waits for it.
    wait_for(
        "the switch reported as waiting for the picker",
        Duration::from_secs(20),
        || async { condition(&h, "qwen", "InferencePool").await["reason"] == "Switching" },
    )
    .await;
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0]["kind"],
        "Service"
    );
    wait_for(
        "Ready through the pool",
        Duration::from_secs(30),
        || async {
            let route = h
                .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
                .await
                .unwrap();
            route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
                && condition(&h, "qwen", "InferencePool").await["status"] == "True"
                && h.deployment("qwen").await["status"]["phase"] == "Ready"
        },
    )
    .await;
    let after = sent.load(Ordering::Relaxed) + 20;
    wait_for(
        "requests through the pool",
        Duration::from_secs(20),
        || async { sent.load(Ordering::Relaxed) >= after },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "of {} requests during the switch",
        sent.load(Ordering::Relaxed)
    );
}

/// An endpoint picker that cannot start says why in the InferencePool condition: the
/// picker's pod trouble (here its image cannot be pulled), not only that it has no
/// available replica.
#[sqlx::test]
async fn a_picker_that_cannot_start_says_why(pool: PgPool) {
    const BROKEN: &str = "registry.k8s.io/gateway-api-inference-extension/epp:does-not-exist";
    let h = harness_on(
        pool,
        cluster(true).fail_images("*/epp:does-not-exist"),
        |c| {
            c.build.epp_image = BROKEN.into();
        },
    )
    .await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", pooled_spec(1)).await;
    wait_for(
        "the picker's trouble in the InferencePool condition",
        Duration::from_secs(30),
        || async {
            let inference = condition(&h, "qwen", "InferencePool").await;
            inference["status"] == "False"
                && inference["message"].as_str().is_some_and(|m| {
                    m.contains("the endpoint picker has no available replica yet")
                        && m.contains("the endpoint picker's pod qwen-epp-")
                        && m.contains(&format!("image `{BROKEN}` cannot be pulled"))
                })
        },
    )
    .await;
}

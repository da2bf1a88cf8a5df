//! Prefill/decode disaggregation on the emulator: a Deployment per role behind one
//! InferencePool, Ready only when both roles are, a long prompt answered by a prefill pod
//! then a decode pod, one role scaled without touching the other.
//!
//! The emulator's endpoint picker reads the picker's configuration as llm-d's does (the
//! `prefill`/`decode` profiles filtering by the `llm-d.ai/role` label, the
//! `prefix-based-pd-decider`'s `nonCachedTokens`, a prompt's tokens counted as its
//! characters / 4: llm-d-inference-scheduler `profilehandler/disagg`), and names the prefill
//! pod in `x-prefiller-host-port` (`pkg/common/routing/common.go`); a decode pod's routing
//! sidecar (`pkg/sidecar/proxy/chat_completions.go`) has the prefill pod compute the prompt
//! first, which the emulator's answer names in `x-emulator-prefill-pod`.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const PATH: &str = "/api/v1/projects/team-a/deployments/big";

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(100))
        .inference_api(true)
        .gateway("gateway-system", "inference")
}

fn spec(prefill: i64, decode: i64) -> Value {
    let mut spec = sim_spec();
    spec["routing"] = json!({"mode": "InferencePool"});
    spec["disaggregation"] = json!({
        "prefill": {"replicas": prefill},
        "decode": {"replicas": decode},
    });
    spec
}

/// The live pods of one role: (name, uid).
async fn role_pods(h: &Harness, role: &str) -> Vec<(String, String)> {
    h.live_pods(&format!("llm-d.ai/role={role}")).await
}

fn role<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["status"]["roles"]
        .as_array()
        .and_then(|roles| roles.iter().find(|r| r["role"] == name))
        .unwrap_or(&Value::Null)
}

async fn ready(h: &Harness) -> Value {
    wait_for("Ready with both roles", Duration::from_secs(30), || async {
        h.deployment("big").await["status"]["phase"] == "Ready"
    })
    .await;
    h.deployment("big").await
}

async fn complete(url: &str, prompt: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&json!({"model": "big", "prompt": prompt, "max_tokens": 3}))
        .send()
        .await
        .unwrap()
}

#[sqlx::test(migrations = "./migrations")]
async fn a_disaggregated_deployment_serves_through_prefill_then_decode(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "big", spec(1, 2)).await;
    let record = ready(&h).await;
    assert_eq!(
        record["status"]["replicas"]["desired"], 3,
        "{}",
        record["status"]
    );
    assert_eq!(
        role(&record, "prefill")["replicas"]["ready"],
        1,
        "{}",
        record["status"]
    );
    assert_eq!(
        role(&record, "decode")["replicas"]["ready"],
        2,
        "{}",
        record["status"]
    );
    assert_eq!(record["spec"]["replicas"], 3);

    // A Deployment per role, the routing sidecar on decode pods, one pool over both.
    let decode = h.live("apps/v1", "Deployment", "big-decode").await.unwrap();
    let prefill = h
        .live("apps/v1", "Deployment", "big-prefill")
        .await
        .unwrap();
    assert_eq!(
        (
            decode["spec"]["replicas"].clone(),
            prefill["spec"]["replicas"].clone()
        ),
        (json!(2), json!(1))
    );
    assert_eq!(
        decode["spec"]["template"]["spec"]["initContainers"][0]["name"],
        "routing-sidecar"
    );
    // The sidecar runs beside the engine (a native sidecar: running, started and ready).
    let pods = h
        .api("v1", "Pod")
        .list(&kube::api::ListParams::default().labels("llm-d.ai/role=decode"))
        .await
        .unwrap();
    let sidecar = &pods.items[0].data["status"]["initContainerStatuses"][0];
    assert_eq!(sidecar["name"], "routing-sidecar");
    assert_eq!(
        (sidecar["started"].clone(), sidecar["ready"].clone()),
        (json!(true), json!(true)),
        "{sidecar}"
    );
    assert!(sidecar["state"]["running"].is_object(), "{sidecar}");
    assert!(h.live("apps/v1", "Deployment", "big").await.is_none());
    // The sidecar's own ServiceAccount, which may only read the pool and its pods.
    assert_eq!(
        decode["spec"]["template"]["spec"]["serviceAccountName"],
        "big-routing-sidecar"
    );
    let access = h
        .live(
            "rbac.authorization.k8s.io/v1",
            "Role",
            "big-routing-sidecar",
        )
        .await
        .unwrap();
    assert_eq!(access["rules"].as_array().unwrap().len(), 2, "{access}");
    assert!(
        h.live("v1", "ServiceAccount", "big-routing-sidecar")
            .await
            .is_some()
    );
    let pool = h
        .live("inference.networking.k8s.io/v1", "InferencePool", "big")
        .await
        .unwrap();
    assert!(
        pool["spec"]["selector"]["matchLabels"]
            .get("llm-d.ai/role")
            .is_none()
    );

    // A long prompt: the picker names a prefill pod, the decode pod's sidecar has it
    // compute the prompt, the decode pod answers.
    let url = record["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let prefill_pods = role_pods(&h, "prefill").await;
    let decode_pods = role_pods(&h, "decode").await;
    let long = "the quick brown fox jumps over the lazy dog ".repeat(4);
    let answer = complete(&url, &long).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let by = |r: &reqwest::Response, header: &str| {
        r.headers()
            .get(header)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let decoder = by(&answer, "x-emulator-pod").unwrap();
    let prefiller = by(&answer, "x-emulator-prefill-pod");
    assert!(decode_pods.iter().any(|(n, _)| *n == decoder), "{decoder}");
    assert_eq!(prefiller.as_deref(), Some(prefill_pods[0].0.as_str()));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["model"], "big");
    // A short one (under nonCachedTokens = 16 tokens of 4 characters) is decoded whole.
    let short = complete(&url, "hello there").await;
    assert_eq!(short.status(), StatusCode::OK);
    assert!(
        decode_pods
            .iter()
            .any(|(n, _)| Some(n.clone()) == by(&short, "x-emulator-pod"))
    );
    assert_eq!(by(&short, "x-emulator-prefill-pod"), None);
    // A caller cannot name a prefill target itself: the picker clears the header.
    let forged = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .header("x-prefiller-host-port", "169.254.169.254:80")
        .json(&json!({"model": "big", "prompt": "hi", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::OK);
    assert_eq!(by(&forged, "x-emulator-prefill-pod"), None);

    // Scaling one role leaves the other's pods as they were.
    let scaled = h
        .app
        .post_json(
            &format!("{PATH}/scale"),
            &json!({"replicas": 2, "role": "prefill"}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    let scaled: Value = scaled.json().await.unwrap();
    assert_eq!(scaled["spec"]["disaggregation"]["prefill"]["replicas"], 2);
    assert_eq!(scaled["spec"]["replicas"], 4);
    wait_for(
        "two prefill pods ready",
        Duration::from_secs(30),
        || async {
            let record = h.deployment("big").await;
            role(&record, "prefill")["replicas"]["ready"] == 2
                && record["status"]["phase"] == "Ready"
        },
    )
    .await;
    assert_eq!(role_pods(&h, "decode").await, decode_pods);
    // (Its `modelplane.io/generation` annotation follows the record; its spec is as it was.)
    assert_eq!(
        h.live("apps/v1", "Deployment", "big-decode").await.unwrap()["spec"],
        decode["spec"]
    );

    // Without a role the scale names the field it needs.
    let no_role = h
        .app
        .post_json(&format!("{PATH}/scale"), &json!({"replicas": 3}))
        .await;
    assert_eq!(no_role.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = no_role.json().await.unwrap();
    assert_eq!(problem["errors"][0]["field"], "role", "{problem}");

    // Deleting it removes both roles and the sidecar's access with it.
    let deleted = h
        .app
        .request(reqwest::Method::DELETE, PATH)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    wait_for("everything of it gone", Duration::from_secs(30), || async {
        h.live("apps/v1", "Deployment", "big-decode")
            .await
            .is_none()
            && h.live("apps/v1", "Deployment", "big-prefill")
                .await
                .is_none()
            && h.live("v1", "ServiceAccount", "big-routing-sidecar")
                .await
                .is_none()
            && h.live(
                "rbac.authorization.k8s.io/v1",
                "Role",
                "big-routing-sidecar",
            )
            .await
            .is_none()
            && h.live(
                "rbac.authorization.k8s.io/v1",
                "RoleBinding",
                "big-routing-sidecar",
            )
            .await
            .is_none()
    })
    .await;
}

#[sqlx::test(migrations = "./migrations")]
async fn disaggregation_requests_name_the_field_they_get_wrong(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let create = |spec: Value| {
        let app = &h.app;
        async move {
            let response = app
                .post_json(
                    "/api/v1/projects/team-a/deployments",
                    &json!({"name": "big", "spec": spec}),
                )
                .await;
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            (status, body)
        }
    };
    let fields = |body: &Value| -> Vec<String> {
        body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_owned())
            .collect()
    };
    // Service routing cannot send a request to two pods.
    let mut service_mode = spec(1, 1);
    service_mode["routing"] = json!({});
    let (status, body) = create(service_mode).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(fields(&body), ["spec.disaggregation"], "{body}");
    // A role's own limits, named under the role.
    let mut bad = spec(-1, 1);
    bad["disaggregation"]["decode"]["args"] = json!(["--port=9000"]);
    bad["disaggregation"]["decode"]["resources"] = json!({"gpu": {"count": 1, "product": "H100"}});
    let (status, body) = create(bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let named = fields(&body);
    for field in [
        "spec.disaggregation.prefill.replicas",
        "spec.disaggregation.decode.args[0]",
        "spec.disaggregation.decode.resources.gpu",
    ] {
        assert!(named.iter().any(|f| f == field), "{field} not in {named:?}");
    }
    // Without a pool the sidecar has nothing to serve; decode pods take every request; the
    // engine's port is behind the sidecar.
    let mut fallback = spec(1, 1);
    fallback["routing"]["inferencePool"] = json!({"whenUnavailable": "Service"});
    let (status, body) = create(fallback).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        fields(&body),
        ["spec.routing.inferencePool.whenUnavailable"],
        "{body}"
    );
    let (status, body) = create(spec(1, 0)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        fields(&body),
        ["spec.disaggregation.decode.replicas"],
        "{body}"
    );
    let mut port = spec(1, 1);
    port["engine"]["args"] = json!(["--port", "8000"]);
    let (status, body) = create(port).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(fields(&body), ["spec.engine.args[0]"], "{body}");
    // Roles and autoscaling do not mix yet.
    let mut autoscaled = spec(1, 1);
    autoscaled["autoscaling"] = json!({"minReplicas": 1, "maxReplicas": 3,
                                   "target": {"metric": "waitingPerReplica", "value": 4}});
    let (status, body) = create(autoscaled).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        fields(&body).contains(&"spec.autoscaling".to_owned()),
        "{body}"
    );

    // Set at creation and kept: a patch that drops it is refused, nothing changes.
    let (status, _) = create(spec(1, 1)).await;
    assert_eq!(status, StatusCode::CREATED);
    let patch = h
        .app
        .request(reqwest::Method::PATCH, PATH)
        .header("content-type", "application/merge-patch+json")
        .json(&json!({"spec": {"disaggregation": null}}))
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = patch.json().await.unwrap();
    assert_eq!(fields(&body), ["spec.disaggregation"], "{body}");
    assert_eq!(h.deployment("big").await["generation"], 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn one_role_that_cannot_run_holds_the_deployment_back_and_is_named(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    // Prefill pods asking for more CPU than any node has stay Pending (Unschedulable).
    let mut big = spec(1, 1);
    big["disaggregation"]["prefill"]["resources"] = json!({"cpu": "500", "memory": "1Gi"});
    create_with(&h, "big", big).await;
    wait_for(
        "the decode role ready and the prefill role named as the cause",
        Duration::from_secs(30),
        || async {
            let record = h.deployment("big").await;
            role(&record, "decode")["replicas"]["ready"] == 1
                && role(&record, "prefill")["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
                && record["status"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("prefill: "))
        },
    )
    .await;
    let record = h.deployment("big").await;
    assert_ne!(record["status"]["phase"], "Ready", "{}", record["status"]);
    assert_eq!(
        role(&record, "decode")["message"],
        "",
        "{}",
        record["status"]
    );
    let available = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Available")
        .cloned()
        .unwrap();
    assert_eq!(available["status"], "False", "{available}");
    assert_eq!(
        available["message"],
        "1/2 replicas available (prefill 0/1, decode 1/1)"
    );

    // Fixing the role's resources (allowed: only adding or dropping the roles is not) makes
    // the deployment Ready.
    let patch = h
        .app
        .request(reqwest::Method::PATCH, PATH)
        .header("content-type", "application/merge-patch+json")
        .json(&json!({"spec": {"disaggregation": {"prefill": {"resources": {"cpu": "1", "memory": "1Gi"}}}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), StatusCode::OK);
    let record = ready(&h).await;
    assert_eq!(role(&record, "prefill")["replicas"]["ready"], 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_routing_sidecar_that_cannot_be_pulled_is_named_on_the_decode_role(pool: PgPool) {
    // The kubelet pulls init containers first: a sidecar image that fails holds the decode
    // pods in `Init:ImagePullBackOff` (their containers `PodInitializing`).
    let h = harness_on(pool, cluster().fail_images("*disagg-sidecar*"), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "big", spec(1, 1)).await;
    wait_for(
        "the decode role's cause to name the sidecar's image",
        Duration::from_secs(30),
        || async {
            let record = h.deployment("big").await;
            role(&record, "decode")["message"]
                .as_str()
                .is_some_and(|m| m.contains("llm-d-router-disagg-sidecar"))
        },
    )
    .await;
    // The prefill role comes up; the deployment is held back by the decode role alone.
    wait_for(
        "the prefill role ready",
        Duration::from_secs(30),
        || async { role(&h.deployment("big").await, "prefill")["replicas"]["ready"] == 1 },
    )
    .await;
    let record = h.deployment("big").await;
    assert_eq!(record["status"]["phase"], "Failed", "{}", record["status"]);
    assert!(
        record["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("decode: "),
        "{}",
        record["status"]
    );
    assert_eq!(
        role(&record, "prefill")["message"],
        "",
        "{}",
        record["status"]
    );
    let pods = h
        .api("v1", "Pod")
        .list(&kube::api::ListParams::default().labels("llm-d.ai/role=decode"))
        .await
        .unwrap();
    let pod = &pods.items[0].data;
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let initialized = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Initialized")
        .cloned()
        .unwrap();
    assert_eq!(initialized["status"], "False", "{initialized}");
}

/// GPU-hours are counted per role: the project's usage report has a row for each role of a
/// disaggregated deployment, each with the GPUs its own ready pods hold.
#[sqlx::test(migrations = "./migrations")]
async fn gpu_hours_are_reported_per_role(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = spec(1, 2);
    spec["resources"]["gpu"] = json!({"count": 1});
    spec["disaggregation"]["decode"]["resources"] = json!({"gpu": {"count": 2}});
    create_with(&h, "big", spec).await;
    ready(&h).await;
    let usage = || async {
        h.app
            .get("/api/v1/projects/team-a/usage")
            .await
            .json::<Value>()
            .await
            .unwrap()
    };
    wait_for(
        "GPU-hours of both roles",
        Duration::from_secs(20),
        || async {
            let report = usage().await;
            report["deployments"].as_array().is_some_and(|rows| {
                rows.len() == 2 && rows.iter().all(|r| r["gpuHours"].as_f64() > Some(0.0))
            })
        },
    )
    .await;
    let report = usage().await;
    let mut roles: Vec<(String, String)> = report["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].to_string(), r["role"].to_string()))
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        [
            (r#""big""#.to_owned(), r#""decode""#.to_owned()),
            (r#""big""#.to_owned(), r#""prefill""#.to_owned())
        ],
        "{report}"
    );
    // Held at 1 GPU for the prefill pod and 2 × 2 for the decode pods.
    let mut held: Vec<(String, i64)> =
        sqlx::query_as("select track, gpus from gpu_usage where ended_at is null")
            .fetch_all(&h.pool)
            .await
            .unwrap();
    held.sort();
    assert_eq!(held, [("decode".to_owned(), 4), ("prefill".to_owned(), 1)]);
}

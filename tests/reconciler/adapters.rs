//! LoRA adapters on `sim` pods: loaded through the engine's runtime adapter API by the
//! worker's loader, never by rolling the pods.
//!
//! The emulator's sim engine serves llm-d-inference-sim's adapter API
//! (pkg/llm-d-inference-sim/lora.go: `POST /v1/load_lora_adapter` and
//! `/v1/unload_lora_adapter`, 200 with an empty body; `GET /v1/models` lists each adapter
//! with the base model as its parent) and answers a request naming an unknown model 404
//! `NotFoundError`, as vLLM's OpenAI server does. The kubelet holds a pod with a readiness
//! gate out of Ready until the gate's condition is True (`generatePodReadyCondition`,
//! kubernetes pkg/kubelet/status/generate.go).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::load::{cluster, openai, ready};
use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const PATH: &str = "/api/v1/projects/team-a/deployments/tuned";

fn spec() -> Value {
    let mut spec = sim_spec();
    spec["replicas"] = json!(2);
    spec["adapters"] = json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}]);
    spec
}

/// The model server pods of `tuned`: name → (uid, restart count).
async fn pods(h: &Harness) -> Vec<(String, String, i64)> {
    let list = h.api("v1", "Pod").list(&Default::default()).await.unwrap();
    let mut pods: Vec<(String, String, i64)> = list
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("tuned-"))
                && p.metadata.deletion_timestamp.is_none()
        })
        .map(|p| {
            let restarts = p.data["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0);
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.uid.clone().unwrap(),
                restarts,
            )
        })
        .collect();
    pods.sort();
    pods
}

fn adapter<'a>(record: &'a Value, name: &str) -> Option<&'a Value> {
    record["status"]["adapters"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
}

/// Waits until `name` is loaded on `n` of `n` serving pods.
async fn loaded_on(h: &Harness, name: &str, n: i64) {
    wait_for(
        &format!("adapter {name} on {n} pods"),
        Duration::from_secs(30),
        || async {
            let record = h.deployment("tuned").await;
            adapter(&record, name).is_some_and(|a| a["loaded"] == n && a["pods"] == n)
        },
    )
    .await;
}

async fn complete(base: &str, model: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/completions"))
        .json(&json!({"model": model, "prompt": "one two three", "max_tokens": 2}))
        .send()
        .await
        .unwrap()
}

#[sqlx::test(migrations = "./migrations")]
async fn adapters_load_and_unload_on_running_pods_without_a_restart(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.load_adapters();
    h.app.create_project("team-a").await;
    create_with(&h, "tuned", spec()).await;
    let record = ready(&h, "tuned").await;
    loaded_on(&h, "sql-lora", 2).await;
    let record_after = h.deployment("tuned").await;
    let condition = record_after["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "AdaptersLoaded")
        .cloned()
        .unwrap();
    assert_eq!(condition["status"], "True", "{condition}");

    // The pods were held out of Ready by the gate until the loader opened it.
    let live = h.api("v1", "Pod").list(&Default::default()).await.unwrap();
    for pod in live.items.iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("tuned-")
    }) {
        let gates = &pod.data["spec"]["readinessGates"];
        assert_eq!(
            gates,
            &json!([{"conditionType": "modelplane.io/adapters-loaded"}])
        );
        let gate = pod.data["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "modelplane.io/adapters-loaded")
            .cloned()
            .unwrap();
        assert_eq!(gate["status"], "True", "{gate}");
    }

    // Served under its own name, by the model server, through the Gateway.
    let (base, base_model) = openai(&record).await;
    assert_eq!(base_model, "tuned");
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lora = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "sql-lora")
        .cloned();
    assert_eq!(lora.unwrap()["parent"], "tuned", "{models}");
    let answer = complete(&base, "sql-lora").await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers().contains_key("x-emulator-pod"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["model"], "sql-lora");
    // An adapter nobody loaded is the model server's 404, not the Gateway's.
    let unknown = complete(&base, "chat-lora").await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert!(unknown.headers().contains_key("x-emulator-pod"));
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["type"], "NotFoundError", "{body}");

    // The engine's adapter API is the loader's, never a caller's: through the Gateway the
    // route's rule with no backendRefs answers 500 (the Gateway API's HTTPRouteNoBackendRefs
    // conformance case) without reaching a pod, trailing slash or not.
    for path in [
        "load_lora_adapter",
        "unload_lora_adapter",
        "load_lora_adapter/",
    ] {
        let refused = reqwest::Client::new()
            .post(format!("{base}/{path}"))
            .json(&json!({"lora_name": "evil", "lora_path": "hf://evil/evil"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "{path}"
        );
        assert!(!refused.headers().contains_key("x-emulator-pod"), "{path}");
    }
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 2, "{models}");

    // Adding one loads it on the running pods: same pods, no restart.
    let before = pods(&h).await;
    assert_eq!(before.len(), 2);
    let added = h
        .app
        .post_json(
            &format!("{PATH}/adapters"),
            &json!({"name": "chat-lora", "source": "hf://acme/chat-lora"}),
        )
        .await;
    assert_eq!(added.status(), StatusCode::OK);
    loaded_on(&h, "chat-lora", 2).await;
    assert_eq!(complete(&base, "chat-lora").await.status(), StatusCode::OK);
    assert_eq!(
        pods(&h).await,
        before,
        "adding an adapter replaced or restarted a pod"
    );

    // Removing one unloads it, again without a restart.
    let removed = h
        .app
        .request(Method::DELETE, &format!("{PATH}/adapters/sql-lora"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    wait_for(
        "sql-lora to be unloaded",
        Duration::from_secs(30),
        || async { complete(&base, "sql-lora").await.status() == StatusCode::NOT_FOUND },
    )
    .await;
    let record = h.deployment("tuned").await;
    assert!(
        adapter(&record, "sql-lora").is_none(),
        "{}",
        record["status"]
    );
    assert_eq!(
        pods(&h).await,
        before,
        "removing an adapter replaced or restarted a pod"
    );

    // A replacement pod gets the whole list before it takes traffic.
    let (victim, _, _) = before[0].clone();
    h.api("v1", "Pod")
        .delete(&victim, &Default::default())
        .await
        .unwrap();
    wait_for("a replacement pod", Duration::from_secs(30), || async {
        let now = pods(&h).await;
        now.len() == 2 && !now.iter().any(|(n, _, _)| *n == victim)
    })
    .await;
    loaded_on(&h, "chat-lora", 2).await;
    for _ in 0..10 {
        assert_eq!(complete(&base, "chat-lora").await.status(), StatusCode::OK);
    }
}

/// Creates `name` with `spec`, which must be refused with a 422; the problem document.
async fn refused_create(h: &Harness, name: &str, spec: Value) -> Value {
    let refused = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": name, "spec": spec}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    refused.json().await.unwrap()
}

#[sqlx::test(migrations = "./migrations")]
async fn adapter_requests_name_the_field_they_get_wrong(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "tuned", spec()).await;
    let cases = [
        (
            json!({"name": "sql-lora", "source": "hf://acme/other"}),
            409,
            "name",
        ),
        (
            json!({"name": "has space", "source": "hf://acme/x"}),
            422,
            "name",
        ),
        (
            json!({"name": "tuned", "source": "hf://acme/x"}),
            422,
            "name",
        ),
        (
            json!({"name": "s3-lora", "source": "s3://bucket/lora"}),
            422,
            "source",
        ),
        (json!({"name": "bad", "source": "ftp://x"}), 422, "source"),
    ];
    for (body, status, field) in cases {
        let response = h.app.post_json(&format!("{PATH}/adapters"), &body).await;
        assert_eq!(response.status().as_u16(), status, "{body}");
        let problem: Value = response.json().await.unwrap();
        let named = problem["errors"]
            .as_array()
            .map(|e| e.iter().any(|e| e["field"] == field))
            .unwrap_or(false)
            || problem["field"] == field;
        assert!(named, "{body}: {problem}");
    }
    let missing = h
        .app
        .request(Method::DELETE, &format!("{PATH}/adapters/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    // A tgi deployment cannot have adapters: the spec field is named.
    let mut tgi = spec();
    tgi["engine"] = json!({"kind": "tgi"});
    tgi["resources"]["gpu"] = json!({"count": 1});
    let problem = refused_create(&h, "tgi", tgi).await;
    assert!(problem.to_string().contains("spec.adapters"), "{problem}");
    // The variable that opens the engine's adapter API is modelplane's to set: by hand it
    // would open the API on a route that does not refuse it.
    let mut opened = sim_spec();
    opened["engine"]["env"] =
        json!([{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}]);
    let problem = refused_create(&h, "opened", opened).await;
    assert_eq!(
        problem["errors"][0]["field"], "spec.engine.env[0].name",
        "{problem}"
    );
    // Adapters the engine starts with would be unloaded as not on the list.
    let mut clash = spec();
    clash["engine"]["args"] = json!(["--lora-modules", r#"{"name":"x","path":"/x"}"#]);
    let problem = refused_create(&h, "clash", clash).await;
    assert_eq!(
        problem["errors"][0]["field"], "spec.engine.args[0]",
        "{problem}"
    );
    // Nothing was half-written: the spec still lists exactly the one adapter.
    let record = h.deployment("tuned").await;
    assert_eq!(
        record["spec"]["adapters"],
        json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}])
    );
}
